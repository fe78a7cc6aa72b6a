package stream

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/internal/messages"
)

// WorkerConsumerConfig is the durable pull consumer of worker ns/pool/worker:
// named messages.ConsumerName, filtered to its dispatch subject, explicit
// acks, every stored dispatch delivered.
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
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: c.Worker.InactiveThreshold,
	}
}

// EnsureWorkerConsumer creates the worker's consumer, or updates it to
// WorkerConsumerConfig (a consumer an older sidecar created, or one left
// by a previous connection of the same Pod, which keeps its unacked
// dispatches). Workers may only bind to it: NATS does not check a
// consumer's deliver subject against its creator's permissions, so no
// worker may create or change consumers.
func (s *Store) EnsureWorkerConsumer(ctx context.Context, ns, pool, worker string) error {
	for kind, v := range map[string]string{"namespace": ns, "pool": pool, "worker": worker} {
		if err := messages.ValidateToken(kind, v); err != nil {
			return fmt.Errorf("worker consumer: %w", err)
		}
	}
	cfg := s.Config.WorkerConsumerConfig(ns, pool, worker)
	if _, err := s.JS.CreateOrUpdateConsumer(ctx, s.Config.Stream, cfg); err != nil {
		return fmt.Errorf("create consumer %s on stream %s: %w", cfg.Durable, s.Config.Stream, err)
	}
	return nil
}
