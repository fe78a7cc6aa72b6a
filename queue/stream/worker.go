package stream

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/internal/messages"
)

// WorkerConsumerConfig is the durable pull consumer of worker ns/pool/worker:
// named messages.ConsumerName, filtered to its dispatch subject, explicit
// acks. A new consumer delivers only dispatches stored after it: the
// activator dispatches to a worker once it registered, which it does after
// binding to the consumer, and a consumer re-created for a Pod whose
// previous one the server deleted (inactive) must not replay dispatches
// that Pod already ran (the activator re-dispatches whatever was lost).
func (c Config) WorkerConsumerConfig(ns, pool, worker string) jetstream.ConsumerConfig {
	c = c.WithDefaults()
	subj := messages.Subjects{Prefix: c.Prefix}
	return jetstream.ConsumerConfig{
		Durable:           messages.ConsumerName(ns, pool, worker),
		Description:       "dispatches of worker " + ns + "/" + worker,
		FilterSubject:     subj.Dispatch(ns, pool, worker),
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           c.Worker.AckWait,
		MaxAckPending:     c.Worker.MaxAckPending,
		DeliverPolicy:     jetstream.DeliverNewPolicy,
		InactiveThreshold: c.Worker.InactiveThreshold,
		MaxDeliver:        c.Worker.MaxDeliver,
	}
}

// DefaultWorkerMaxDeliver bounds the deliveries of one dispatch to its
// worker. A dispatch is redelivered only when its worker neither acked it
// nor kept it in progress for an ack wait (frozen, cut off, dead) or handed
// it back unrun (its framework refused it).
const DefaultWorkerMaxDeliver = 5

// EnsureWorkerConsumer makes the worker's consumer WorkerConsumerConfig.
// Workers may only bind to it: NATS does not check a consumer's deliver
// subject against its creator's permissions, so no worker may create or
// change consumers. An existing pull consumer on the worker's dispatch
// subject with explicit acks (made by an older sidecar, or by a previous
// connection of the same Pod) is updated in place and keeps its unacked
// dispatches; any other consumer of that name (a push consumer, another
// filter: made by a worker under an older grant) is deleted and created
// anew.
func (s *Store) EnsureWorkerConsumer(ctx context.Context, ns, pool, worker string) error {
	for _, f := range []struct{ kind, v string }{{"namespace", ns}, {"pool", pool}, {"worker", worker}} {
		if err := messages.ValidateToken(f.kind, f.v); err != nil {
			return fmt.Errorf("worker consumer: %w", err)
		}
	}
	want := s.Config.WorkerConsumerConfig(ns, pool, worker)
	name := s.Config.Stream
	c, err := s.JS.Consumer(ctx, name, want.Durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return s.createWorkerConsumer(ctx, want)
	case errors.Is(err, jetstream.ErrNotPullConsumer):
		// A push consumer: replaced below.
	case err != nil:
		return fmt.Errorf("read consumer %s on stream %s: %w", want.Durable, name, err)
	}
	if c != nil { // nil: a push consumer, replaced below
		have := c.CachedInfo().Config
		if have.DeliverSubject == "" && have.FilterSubject == want.FilterSubject && len(have.FilterSubjects) == 0 && have.AckPolicy == want.AckPolicy {
			// A reconnect of the same Pod: one read, no write.
			if have.AckWait == want.AckWait && have.MaxAckPending == want.MaxAckPending && have.InactiveThreshold == want.InactiveThreshold &&
				have.MaxDeliver == want.MaxDeliver {
				return nil
			}
			upd := want
			upd.DeliverPolicy, upd.OptStartSeq, upd.OptStartTime = have.DeliverPolicy, have.OptStartSeq, have.OptStartTime
			if _, err := s.JS.UpdateConsumer(ctx, name, upd); err == nil {
				return nil
			}
			// Not updatable in place (another replay policy, ...): replaced.
		}
	}
	if err := s.JS.DeleteConsumer(ctx, name, want.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("delete foreign consumer %s on stream %s: %w", want.Durable, name, err)
	}
	return s.createWorkerConsumer(ctx, want)
}

func (s *Store) createWorkerConsumer(ctx context.Context, want jetstream.ConsumerConfig) error {
	// CreateConsumer is idempotent for an identical config (two replicas
	// admitting the same worker at once).
	if _, err := s.JS.CreateConsumer(ctx, s.Config.Stream, want); err != nil {
		return fmt.Errorf("create consumer %s on stream %s: %w", want.Durable, s.Config.Stream, err)
	}
	return nil
}
