package activator

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/activator/internal/state"
	"github.com/runplane/runplane/queue/stream"
)

// ActivatorMaxDeliver bounds the deliveries of one message to the
// activator's own consumers (an invocation whose Record cannot be read, a
// result whose Record cannot be written, each retried with a delay).
const ActivatorMaxDeliver = 100

// maxDeliveriesAdvisory is the part of nats-server's
// io.nats.jetstream.advisory.v1.max_deliver the activator reads (nats.go
// has no type for it).
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// maxDeliveriesSubject is where nats-server announces a message of stream
// that reached a consumer's MaxDeliver.
func maxDeliveriesSubject(streamName string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + streamName + ".*"
}

// onMaxDeliveries dead-letters the invocation of a message that reached
// its consumer's MaxDeliver: the server delivers it no more, so it would
// otherwise stay open until it expires, with no reason given.
func (a *Activator) onMaxDeliveries(ctx context.Context, m *nats.Msg) {
	var adv maxDeliveriesAdvisory
	if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
		a.cfg.Logger.Warn("undecodable max-deliveries advisory", "err", err)
		return
	}
	a.metrics.maxDeliveries.WithLabelValues(adv.Consumer).Inc()
	st := a.cfg.Store
	if adv.Stream != st.Config.Stream {
		// A result the activator could not record that often: it is lost;
		// its invocation times out (ExecutionGrace) or is redelivered.
		a.cfg.Logger.Error("a result reached the results consumer's max deliveries and is dropped", "stream", adv.Stream, "seq", adv.StreamSeq, "deliveries", adv.Deliveries)
		return
	}
	a.wg.Go(func() {
		msg, err := st.Stream.GetMsg(ctx, adv.StreamSeq)
		if err != nil {
			a.cfg.Logger.Warn("max deliveries: message gone", "consumer", adv.Consumer, "seq", adv.StreamSeq, "err", err)
			return
		}
		sub, ok := a.subjectOf(msg.Subject)
		if !ok {
			return
		}
		var inv messages.Invocation
		attempt, worker := 0, ""
		if sub.Worker != "" {
			var d messages.Dispatch
			if err := json.Unmarshal(msg.Data, &d); err != nil {
				return
			}
			inv, attempt, worker = d.Invocation, d.Attempt, d.Worker
		} else if err := json.Unmarshal(msg.Data, &inv); err != nil {
			return
		}
		// The subject says whose it is, as the invoke consumer checks
		// (onInvocation): a body naming another namespace or pool is not
		// dead-lettered under it.
		if inv.InvocationID == "" || inv.Namespace != sub.Namespace || inv.Pool != sub.Pool || worker != sub.Worker || !a.cfg.Shard.Owns(inv.Namespace) {
			return
		}
		reason := fmt.Sprintf("delivered %d times to consumer %s without being acked (max deliveries)", adv.Deliveries, adv.Consumer)
		if worker != "" {
			reason = fmt.Sprintf("dispatch of attempt %d delivered %d times to worker %s without a result (max deliveries): the worker froze, lost NATS or its framework refused it each time",
				attempt, adv.Deliveries, worker)
		}
		a.deadLetterDelivered(ctx, inv, attempt, reason)
		if worker == "" {
			a.releaseDelivered(ctx, inv, adv.StreamSeq)
		}
	})
}

// releaseDelivered drops the delivery mark of the invocation message seq
// of inv (state.Delivered) once its Record is final: the invoke consumer's
// ack floor has passed it unacked, so until then only the mark keeps a
// purge from removing the message of an invocation still queued (review
// M1). A Record not final yet (the dead-letter write failed) keeps it:
// the message stays until this leader ends and the next one's rebuild
// finds it.
func (a *Activator) releaseDelivered(ctx context.Context, inv messages.Invocation, seq uint64) {
	rec, _, err := a.cfg.Store.Get(ctx, stream.Key(inv.Namespace, inv.InvocationID))
	if err != nil || !rec.State.Terminal() {
		return
	}
	a.locked(func(s *state.State) { s.Handled(state.Subject{Namespace: inv.Namespace, Pool: inv.Pool}, seq) })
	a.kickPurge()
}

// deadLetterDelivered dead-letters inv when attempt (0: not dispatched) is
// still its current one: an older attempt's advisory never ends a newer
// attempt.
func (a *Activator) deadLetterDelivered(ctx context.Context, inv messages.Invocation, attempt int, reason string) {
	var it *state.Item
	a.locked(func(s *state.State) {
		cur := s.Item(state.ItemKey(inv))
		if cur != nil && cur.Attempt == attempt {
			it = cur
			s.Forget(cur, cur.Worker)
		}
	})
	if it == nil {
		// Not open here (a previous leader's, or already settled): only a
		// Record still on that attempt is ended.
		it = &state.Item{Inv: inv}
		rec, rev, err := a.cfg.Store.Get(ctx, stream.Key(inv.Namespace, inv.InvocationID))
		if err != nil || rec.Attempt != attempt || rec.State.Terminal() {
			return
		}
		it.Rec = messages.Cached{Record: rec, Rev: rev}
	}
	a.cfg.Logger.Warn("dead-lettering an invocation", "invocation", inv.InvocationID, "namespace", inv.Namespace, "reason", reason)
	a.deadLetter(ctx, it, reason)
	a.poke()
}
