package activator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/activator/internal/state"
	"github.com/runplane/runplane/queue/stream"
)

// consume runs h on every message of subject of stream streamName through
// the durable consumer <prefix>-<name>.
func (a *Activator) consume(ctx context.Context, streamName, name, subject string, ackWait time.Duration,
	h func(context.Context, jetstream.Msg)) (jetstream.ConsumeContext, error) {
	st := a.cfg.Store
	c, err := st.JS.CreateOrUpdateConsumer(ctx, streamName, jetstream.ConsumerConfig{
		Durable:       a.cfg.ConsumerPrefix + "-" + name,
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       ackWait,
		MaxAckPending: 20000,
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer %s-%s: %w", a.cfg.ConsumerPrefix, name, err)
	}
	if info := c.CachedInfo(); info != nil && name == "results" {
		// Results up to the ack floor were handled by a previous leader.
		a.locked(func(s *state.State) { s.NoteResultSeq(info.AckFloor.Stream) })
	}
	// Consume pulls in batches (up to 500 messages) and hands them over one
	// by one; the handlers never wait on the network for long.
	cc, err := c.Consume(func(m jetstream.Msg) { h(ctx, m) }, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if !errors.Is(err, jetstream.ErrNoHeartbeat) {
			a.cfg.Logger.Debug("consumer error", "consumer", name, "err", err)
		}
	}))
	if err != nil {
		return nil, fmt.Errorf("consume %s: %w", name, err)
	}
	return cc, nil
}

// subjectPool reads the namespace and pool of a <prefix>.<kind>.<ns>.<pool>
// subject.
func (a *Activator) subjectPool(subject, kind string) (ns, pool string, ok bool) {
	tail, ok := strings.CutPrefix(subject, a.cfg.Store.Subjects.Prefix+"."+kind+".")
	if !ok {
		return "", "", false
	}
	ns, pool, ok = strings.Cut(tail, ".")
	return ns, pool, ok && ns != "" && pool != "" && !strings.Contains(pool, ".")
}

// acked logs and counts a failed Ack, Nak or Term of a message of consumer:
// JetStream then redelivers it after the ack wait.
func (a *Activator) acked(consumer, op string, m jetstream.Msg, err error) {
	if err == nil {
		return
	}
	a.metrics.ackErrors.WithLabelValues(consumer, op).Inc()
	a.cfg.Logger.Warn("jetstream acknowledgement failed", "consumer", consumer, "op", op, "subject", m.Subject(), "err", err)
}

// freshAge: an invocation consumed within this of being stored has its
// Record as the ingress created it (or cancelled, which the dispatch
// compare-and-set finds), so it is queued without reading the Record.
const freshAge = 2 * time.Second

// onInvocation takes a new invocation from invoke.<pool>.
func (a *Activator) onInvocation(ctx context.Context, m jetstream.Msg) {
	const c = "invoke"
	var inv messages.Invocation
	if err := json.Unmarshal(m.Data(), &inv); err != nil || inv.InvocationID == "" || inv.Pool == "" || inv.Namespace == "" {
		a.cfg.Logger.Warn("dropping malformed invocation", "subject", m.Subject(), "err", err)
		a.acked(c, "term", m, m.Term())
		return
	}
	md, err := m.Metadata()
	if err != nil {
		a.acked(c, "nak", m, m.Nak())
		return
	}
	var known bool
	if ns, p, ok := a.subjectPool(m.Subject(), "invoke"); !ok || ns != inv.Namespace || p != inv.Pool {
		a.cfg.Logger.Warn("dropping invocation whose body names another pool than its subject", "subject", m.Subject(), "namespace", inv.Namespace, "pool", inv.Pool)
		a.acked(c, "term", m, m.Term())
		return
	}
	a.locked(func(s *state.State) { known = s.Accept(inv, md.Sequence.Stream) })
	if known {
		a.acked(c, "ack", m, m.Ack())
		return
	}
	st := a.cfg.Store
	it := &state.Item{Inv: inv, Seq: md.Sequence.Stream}
	rev, _ := strconv.ParseUint(m.Headers().Get(stream.RevisionHeader), 10, 64)
	if rev != 0 && md.NumDelivered == 1 && a.cfg.Clock.Since(md.Timestamp) < freshAge {
		it.Rec = stream.Cached{Rev: rev, Record: messages.Record{InvocationID: inv.InvocationID, Namespace: inv.Namespace, Pool: inv.Pool, Mode: inv.Mode,
			State: messages.StateQueued, Stream: st.Config.Stream, AcceptedAt: inv.AcceptedAt, UpdatedAt: inv.AcceptedAt}}
	} else {
		// Stored a while ago (the activator was away): it may have been
		// cancelled or timed out since.
		rec, rev, err := st.Get(ctx, stream.Key(inv.Namespace, inv.InvocationID))
		switch {
		case errors.Is(err, stream.ErrNotFound):
			// The Record expired or was removed after a failed publish
			// response; the message is authoritative and the dispatch
			// creates the Record.
		case err != nil:
			a.acked(c, "nak", m, m.NakWithDelay(time.Second))
			return
		case rec.State != messages.StateQueued:
			// Finished, or dispatched by this leader (then it is known) or
			// by the one before (then rebuild loaded it): nothing to do.
			a.acked(c, "ack", m, m.Ack())
			return
		default:
			it.Rec = stream.Cached{Record: rec, Rev: rev}
			it.Attempt = rec.Attempt
		}
	}
	var added bool
	a.locked(func(s *state.State) { added = s.Enqueue(it) })
	if added {
		a.metrics.accepted.WithLabelValues(inv.Pool).Inc()
	}
	a.acked(c, "ack", m, m.Ack())
	a.poke()
}

// onResult records a worker's result and frees its slot. Results come
// from the results stream, where workers publish with headers of their
// choosing and no message ID is trusted: a result stored twice is handled
// twice, and the second time changes nothing (its invocation is forgotten
// and its Record final, which TransitionOfPool never changes). The state
// changes at once, in stream order (so a lost worker's invocations can
// wait for the results it published before it went); the Record write runs
// concurrently and the result is acked after it.
func (a *Activator) onResult(ctx context.Context, m jetstream.Msg) {
	const c = "results"
	var res messages.Result
	if err := json.Unmarshal(m.Data(), &res); err != nil || res.InvocationID == "" {
		a.acked(c, "term", m, m.Term())
		return
	}
	// The subject, which NATS permissions tie to the worker's pool, says
	// whose result it is; the body cannot name another pool.
	ns, p, ok := a.subjectPool(m.Subject(), "result")
	if !ok {
		a.acked(c, "term", m, m.Term())
		return
	}
	if res.Namespace != ns || res.Pool != p {
		a.metrics.foreign.WithLabelValues("result").Inc()
		a.cfg.Logger.Warn("result names another pool than its subject; taken as of the subject's pool", "subject", m.Subject(),
			"namespace", res.Namespace, "pool", res.Pool, "invocation", res.InvocationID)
		res.Namespace, res.Pool = ns, p
	}
	final := res.State
	if !final.Terminal() {
		final = messages.StateFailed
		if res.Error == "" {
			res.Error = fmt.Sprintf("worker reported non-terminal state %q as result", res.State)
		}
	}
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	var it *state.Item
	var other *state.Superseded
	a.locked(func(s *state.State) { it, other = s.Result(res, seq) })
	if other != nil {
		a.sendCancel(other.Namespace, other.Pool, other.Worker, other.InvocationID, other.Attempt) // a newer attempt runs elsewhere
	}
	a.poke()

	a.wg.Go(func() {
		record := func(r *messages.Record) { r.Response, r.Error = res.Response, res.Error }
		var ok bool
		var err error
		key := stream.Key(res.Namespace, res.InvocationID)
		if it != nil {
			ok, err = a.write(it, func(cached *stream.Cached) (bool, error) {
				return a.cfg.Store.TransitionOfPool(ctx, key, cached, res.Pool, final, res.Worker, res.Attempt, record)
			})
		} else {
			var cached stream.Cached
			ok, err = a.cfg.Store.TransitionOfPool(ctx, key, &cached, res.Pool, final, res.Worker, res.Attempt, record)
		}
		if err != nil && !errors.Is(err, stream.ErrNotFound) {
			// Redelivered; the item is forgotten, so it takes the path above
			// without a known Record.
			a.acked(c, "nak", m, m.NakWithDelay(500*time.Millisecond))
			return
		}
		a.acked(c, "ack", m, m.Ack())
		if ok {
			a.metrics.finished.WithLabelValues(res.Pool, string(final)).Inc()
		}
	})
}
