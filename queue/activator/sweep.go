package activator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/activator/internal/state"
	"github.com/runplane/runplane/queue/stream"
)

// removeMessages releases it's messages — its invocation's and every
// Dispatch this leader knows — once its Record is final: nothing reads them
// any more — no dispatch, redelivery or rebuild (which loads non-terminal
// Records only) — and exactly-once stands on the final Record, which the
// dispatch compare-and-set and TransitionOfPool never change, and on the
// stream's duplicate window, which neither a deletion nor a purge shortens.
// They leave with their subjects' next purge (purge.go); now: deleted here
// one by one, for a Record that still counts them in its namespace's share
// (made final by someone else: a cancel), which is given back only once
// they are gone. What a failed delete or purge (or a leader that stopped
// first) leaves, the sweep removes.
//
// With now, it reports whether every message it knew of is gone (false
// also when it had already been called).
func (a *Activator) removeMessages(ctx context.Context, it *state.Item, now bool) bool {
	var holds []state.Hold
	a.locked(func(s *state.State) { holds = s.Final(it) })
	if !now {
		a.kickPurge()
		return false
	}
	gone := len(holds) > 0
	for _, h := range holds {
		err := a.cfg.Store.DeleteMsg(ctx, h.Seq)
		switch {
		case err == nil:
			a.metrics.removed.WithLabelValues("final").Inc()
		case errors.Is(err, jetstream.ErrMsgNotFound):
		default:
			gone = false
			a.cfg.Logger.Debug("remove a final invocation's message; the sweep will", "invocation", it.Inv.InvocationID, "seq", h.Seq, "err", err)
		}
	}
	return gone
}

// sweep removes from the invocation stream the messages of invocations
// whose Record is final — left by a leader that stopped before deleting
// them, a delete that failed, a Dispatch published as its invocation
// finished — and those whose Record has expired: an invocation or
// Dispatch once its Record is older than the Records' TTL, a dead letter
// as its Record goes (the namespace's share of the stream counts it that
// long). It reads headers only, and a Record only for messages of
// invocations not open here. It returns how many it removed.
func (a *Activator) sweep(ctx context.Context) (removed int, err error) {
	st := a.cfg.Store
	c, err := st.Stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{HeadersOnly: true})
	if err != nil {
		return 0, fmt.Errorf("sweep: %w", err)
	}
	now := a.cfg.Clock.Now()
	type verdict struct {
		final, gone, counted bool
	}
	known := map[string]verdict{} // by stream.Key, within this sweep
	// A final Record still counting its share of the stream (a cancel the
	// activator did not meet) is cleared once its messages are gone.
	defer func() {
		if err != nil {
			return
		}
		for key, v := range known {
			if v.counted {
				if err := st.ClearStreamBytes(ctx, key); err != nil {
					a.cfg.Logger.Warn("sweep: clear a final Record's share of the stream", "invocation", key, "err", err)
				}
			}
		}
	}()
	for ctx.Err() == nil {
		batch, err := c.FetchNoWait(500)
		if err != nil {
			return removed, fmt.Errorf("sweep: %w", err)
		}
		got, last := 0, false
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			last = md.NumPending == 0
			ns, id, deadLetter, ok := invocationOf(m.Headers().Get(jetstream.MsgIDHeader))
			if !ok || !a.cfg.Shard.Owns(ns) {
				continue
			}
			key := stream.Key(ns, id)
			var open bool
			a.locked(func(s *state.State) { open = s.Item(key) != nil })
			if open && !deadLetter {
				continue
			}
			v, seen := known[key]
			if !seen {
				rec, _, err := st.Get(ctx, key)
				switch {
				case errors.Is(err, stream.ErrNotFound):
					v.gone = true
				case err != nil:
					return removed, fmt.Errorf("sweep: %w", err)
				default:
					v.final = rec.State.Terminal()
					v.counted = v.final && rec.State != messages.StateDeadLettered && rec.StreamBytes > 0
				}
				known[key] = v
			}
			remove := v.final && !deadLetter
			if v.gone {
				// An invocation whose Record is gone is authoritative (its
				// dispatch creates the Record) until the Records' TTL.
				remove = deadLetter || now.Sub(md.Timestamp) > st.Config.RecordTTL.Duration
			}
			if !remove {
				continue
			}
			if err := st.DeleteMsg(ctx, md.Sequence.Stream); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				return removed, fmt.Errorf("sweep: remove %s at %d: %w", key, md.Sequence.Stream, err)
			}
			removed++
			a.metrics.removed.WithLabelValues("sweep").Inc()
			if sub, ok := a.subjectOf(m.Subject()); ok {
				a.locked(func(s *state.State) { s.Swept(sub, md.Sequence.Stream) })
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return removed, fmt.Errorf("sweep: %w", err)
		}
		if got == 0 || last {
			return removed, nil
		}
	}
	return removed, ctx.Err()
}

// invocationOf reads the namespace and invocation ID from the Nats-Msg-Id
// of an invocation stream message: <ns>/<id> (an invocation),
// dispatch.<ns>/<id>.<attempt> (a Dispatch), <ns>/<id>.deadletter.
// Neither a namespace nor an ID contains '/' or '.'.
func invocationOf(msgID string) (ns, id string, deadLetter, ok bool) {
	rest, dispatch := strings.CutPrefix(msgID, "dispatch.")
	ns, id, ok = strings.Cut(rest, "/")
	if !ok || ns == "" || strings.Contains(ns, ".") {
		return "", "", false, false
	}
	if base, attempt, cut := strings.Cut(id, "."); cut {
		switch {
		case dispatch:
			if _, err := strconv.Atoi(attempt); err != nil {
				return "", "", false, false
			}
		case attempt == "deadletter":
			deadLetter = true
		default:
			return "", "", false, false
		}
		id = base
	} else if dispatch {
		return "", "", false, false
	}
	return ns, id, deadLetter, id != "" && messages.ValidateToken("namespace", ns) == nil
}

// sweepLoop sweeps once the state is rebuilt and then every SweepEvery.
func (a *Activator) sweepLoop(ctx context.Context) {
	t := a.cfg.Clock.NewTicker(a.cfg.SweepEvery)
	defer t.Stop()
	for {
		n, err := a.sweep(ctx)
		if err != nil && ctx.Err() == nil {
			a.cfg.Logger.Warn("sweep of the invocation stream", "removed", n, "err", err)
		} else if n > 0 {
			a.cfg.Logger.Info("removed what finished invocations left in the invocation stream", "messages", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}
