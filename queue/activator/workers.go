package activator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/activator/internal/state"
	"github.com/runplane/runplane/queue/stream"
)

// onEvent tracks workers from sidecar Events. The subject, which NATS
// permissions tie to the one worker allowed to publish on it, must name the
// worker, pool and namespace the body does (checkEvent).
func (a *Activator) onEvent(ctx context.Context, m *nats.Msg) {
	var ev messages.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Worker == "" || ev.Pool == "" {
		return
	}
	if !a.cfg.Shard.Owns(ev.Namespace) {
		return // another shard's worker (checkEvent ties the body to the subject)
	}
	if !a.checkEvent(m.Subject, ev) {
		return
	}
	var out state.EventOutcome
	a.locked(func(s *state.State) { out = s.Event(ev) })
	if out.Unadmitted {
		a.metrics.foreign.WithLabelValues("unadmitted_worker").Inc()
		if out.NewlyHeld {
			a.cfg.Logger.Info("worker event held: no Pod of this name in the pool's namespace is owned by the pool's Deployment (yet)",
				"namespace", ev.Namespace, "pool", ev.Pool, "worker", ev.Worker, "type", ev.Type)
		}
		return
	}
	a.lost(ctx, out.Lost)
	if it := out.HandedBack; it != nil {
		a.metrics.handedBack.WithLabelValues(ev.Namespace, ev.Pool).Inc()
		a.wg.Go(func() { a.recordHandBack(ctx, it, ev, out.StaleDispatch) })
		a.poke()
	}
	if it := out.Started; it != nil {
		a.wg.Add(1)
		if a.cfg.RunningDelay > 0 {
			a.cfg.Clock.AfterFunc(a.cfg.RunningDelay, func() { a.markRunning(ctx, it, ev) })
		} else {
			go a.markRunning(ctx, it, ev)
		}
	}
	if out.Ready || out.Gone {
		a.poke()
	}
}

// markRunning records that a worker started an invocation, unless its
// result is already in: running would add nothing then.
func (a *Activator) markRunning(ctx context.Context, it *state.Item, ev messages.Event) {
	defer a.wg.Done()
	_, err := a.write(ctx, it, func(c *messages.Cached) (bool, error) {
		if it.Done.Load() {
			return false, nil
		}
		return a.cfg.Store.TransitionCached(ctx, stream.Key(it.Inv.Namespace, it.Inv.InvocationID), c, messages.StateRunning, ev.Worker, ev.Attempt, nil)
	})
	if err != nil {
		a.cfg.Logger.Debug("record running", "invocation", ev.InvocationID, "err", err)
	}
}

// lost logs a worker loss and has its invocations settled.
func (a *Activator) lost(ctx context.Context, l *state.Loss) {
	if l == nil {
		return
	}
	a.cfg.Logger.Info("worker lost", "pool", l.Pool, "worker", l.Worker, "reason", l.Why, "invocations", len(l.Items), "clean", l.Clean)
	if len(l.Items) > 0 {
		a.wg.Go(func() { a.settle(ctx, l) })
	}
}

// settle decides what becomes of a lost worker's invocations. A worker
// publishes its results to the stream before it deregisters (or dies), and
// the results consumer may still be behind: settle first waits until it has
// delivered everything stored on result.<pool>, so a finished invocation
// is never run again. What is still open then is checked against its
// Record (a result handled by a previous leader, a cancel, a timeout) and
// only then handed to state.Settle: redelivered, or dead-lettered.
func (a *Activator) settle(ctx context.Context, l *state.Loss) {
	st := a.cfg.Store
	a.waitResults(ctx, l.Namespace, l.Pool)
	for _, it := range l.Items {
		id := it.Inv.InvocationID
		var live, started bool
		a.locked(func(s *state.State) { live, started = s.Settling(it) })
		if !live {
			continue
		}
		rec, _, err := st.Get(ctx, stream.Key(it.Inv.Namespace, id))
		if errors.Is(err, stream.ErrNotFound) || (err == nil && (rec.State.Terminal() || rec.Attempt > it.Attempt)) {
			a.locked(func(s *state.State) { s.Forget(it, "") })
			continue
		}
		if err != nil {
			// The dispatch compare-and-set still guards a redelivery.
			a.cfg.Logger.Warn("settle: read record", "invocation", id, "err", err)
		}
		// Only a clean deregistration shows that the worker never ran it
		// (a started event may be lost); one it did start, clean or not,
		// ran without a result.
		strike := !l.Clean || started || (err == nil && rec.State == messages.StateRunning && rec.Worker == l.Worker)
		var v state.Verdict
		var stale uint64
		a.locked(func(s *state.State) { v, stale = s.Settle(it, strike) })
		switch v {
		case state.Skip:
			continue
		case state.DeadLetter:
			a.metrics.lost.WithLabelValues(l.Namespace, l.Pool).Inc()
			reason := fmt.Sprintf("worker %s lost (%s) on attempt %d; %d of %d allowed losses", l.Worker, l.Why, it.Attempt, it.Strikes, a.cfg.MaxAttempts)
			a.wg.Go(func() { a.deadLetter(ctx, it, reason) })
			continue
		}
		a.metrics.lost.WithLabelValues(l.Namespace, l.Pool).Inc()
		a.metrics.redelivered.WithLabelValues(l.Namespace, l.Pool).Inc()
		if stale != 0 {
			// The abandoned attempt must not run later (a restarted worker
			// of the same name resumes its consumer): remove its Dispatch.
			if err := st.DeleteMsg(ctx, stale); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				a.cfg.Logger.Debug("settle: delete abandoned dispatch", "invocation", id, "seq", stale, "err", err)
			}
		}
	}
	a.poke()
}

// waitResults returns once the results consumer has delivered every result
// stored on result.<pool> so far, or when it has made no progress for
// ResultAckWait and a bit (a result delivered to a previous leader comes
// back only after it).
func (a *Activator) waitResults(ctx context.Context, ns, pool string) {
	st := a.cfg.Store
	m, err := st.Results.GetLastMsgForSubject(ctx, st.Subjects.Result(ns, pool))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return
	}
	if err != nil {
		a.cfg.Logger.Warn("settle: last result", "pool", pool, "err", err)
		return
	}
	clk := a.cfg.Clock
	patience := a.cfg.ResultAckWait + time.Second
	deadline := clk.Now().Add(patience)
	t := clk.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	var last uint64
	for {
		var seen uint64
		a.locked(func(s *state.State) { seen = s.ResultSeq() })
		if seen >= m.Sequence {
			return
		}
		if seen != last {
			last, deadline = seen, clk.Now().Add(patience)
		}
		if clk.Now().After(deadline) {
			a.cfg.Logger.Warn("settle: results consumer behind; deciding on the Records", "pool", pool, "seen", seen, "last", m.Sequence)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// deadLetter publishes it on deadletter.<pool> and records dead_lettered.
func (a *Activator) deadLetter(ctx context.Context, it *state.Item, reason string) {
	st := a.cfg.Store
	inv := it.Inv
	if it.Light {
		if full, err := a.readInvocation(ctx, it); err == nil {
			inv = full // the dead letter carries the payload when the stream still has it
		}
	}
	b, err := messages.Encode(inv)
	if err != nil {
		a.cfg.Logger.Error("dead letter: encode", "invocation", it.Inv.InvocationID, "err", err)
		return
	}
	msg := &nats.Msg{Subject: st.Subjects.DeadLetter(it.Inv.Namespace, it.Inv.Pool), Data: b, Header: nats.Header{}}
	msg.Header.Set("Runplane-Reason", reason)
	for {
		_, err := st.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(messages.MsgID(it.Inv.Namespace, it.Inv.InvocationID)+".deadletter"))
		if err == nil {
			break
		}
		select {
		case <-ctx.Done(): // shutting down: the next leader dead-letters it
			return
		case <-a.cfg.Clock.After(time.Second):
		}
	}
	_, err = a.write(ctx, it, func(c *messages.Cached) (bool, error) {
		return st.TransitionCached(ctx, stream.Key(it.Inv.Namespace, it.Inv.InvocationID), c, messages.StateDeadLettered, "", 0, func(r *messages.Record) { r.Error = reason })
	})
	if err != nil {
		a.cfg.Logger.Warn("dead-letter record update failed", "invocation", it.Inv.InvocationID, "err", err)
	}
	a.metrics.deadLettered.WithLabelValues(it.Inv.Namespace, it.Inv.Pool).Inc()
}

// expire records an invocation timed out on the activator's authority
// (TTL in queue or execution timeout) and cancels it on its worker.
func (a *Activator) expire(ctx context.Context, e state.Expiry) {
	if e.Worker != "" {
		a.sendCancel(e.Item.Inv.Namespace, e.Item.Inv.Pool, e.Worker, e.Item.Inv.InvocationID, e.Item.Attempt)
	}
	_, err := a.write(ctx, e.Item, func(c *messages.Cached) (bool, error) {
		return a.cfg.Store.TransitionCached(ctx, stream.Key(e.Item.Inv.Namespace, e.Item.Inv.InvocationID), c, messages.StateTimedOut, "", 0, func(r *messages.Record) { r.Error = e.Reason })
	})
	if err != nil {
		a.cfg.Logger.Warn("expire: record update failed", "invocation", e.Item.Inv.InvocationID, "err", err)
	}
}

// housekeep runs the periodic checks (lost workers, TTLs, execution
// timeouts), then scaling and status.
func (a *Activator) housekeep(ctx context.Context) {
	if !a.cfg.NC.IsConnected() {
		// Cut from NATS: no heartbeat can reach us, and nothing we decide
		// could be written. No worker is lost for our own outage.
		a.locked(func(s *state.State) { s.Unheard() })
		return
	}
	var losses []*state.Loss
	var expired []state.Expiry
	var silenced []state.Silence
	a.locked(func(s *state.State) { losses, expired, silenced = s.Housekeep() })
	for _, si := range silenced {
		a.cfg.Logger.Warn("worker silent: no new work; holding what it holds for it", "namespace", si.Namespace, "pool", si.Pool,
			"worker", si.Worker, "held", si.Held, "until", si.Until)
		a.metrics.silentWorkers.WithLabelValues(si.Namespace, si.Pool).Inc()
	}
	for _, l := range losses {
		a.lost(ctx, l)
	}
	for _, e := range expired {
		a.wg.Go(func() { a.expire(ctx, e) })
	}
	if a.scaler != nil {
		a.scaleAll(ctx)
	}
	a.publishStatus(ctx)
}

// publishStatus writes each pool's status to the pool-status bucket when
// it changed, and at least every 5s.
func (a *Activator) publishStatus(ctx context.Context) {
	type put struct {
		key string
		b   []byte
	}
	var puts []put
	names := map[string]bool{}
	known := map[string]int{}  // replicas by state key
	limits := map[string]int{} // in-flight bound by state key
	for _, pl := range a.cfg.Pools.List() {
		k := state.Key(pl.Namespace, pl.Name)
		names[k], known[k], limits[k] = true, pl.Replicas, a.cfg.Limits.InFlight(pl.Policy)
	}
	a.locked(func(s *state.State) {
		now := s.Now()
		for k, n := range limits {
			s.SetMaxInFlight(k, n)
		}
		for _, n := range s.PoolNames() {
			names[n] = true
		}
		for n := range names {
			ps := s.Status(n, known[n])
			a.metrics.knownPool(ps.Namespace, ps.Pool)
			a.metrics.backlog.WithLabelValues(ps.Namespace, ps.Pool).Set(float64(ps.Backlog))
			a.metrics.inflight.WithLabelValues(ps.Namespace, ps.Pool).Set(float64(ps.InFlight))
			// A timestamp, not an age: it stays true between these updates, and
			// an empty queue has no series (an alert on its age has nothing to read).
			if at, ok := s.OldestQueued(n); ok {
				a.metrics.oldestQueued.WithLabelValues(ps.Namespace, ps.Pool).Set(float64(at.UnixMilli()) / 1000)
			} else {
				a.metrics.oldestQueued.DeleteLabelValues(ps.Namespace, ps.Pool)
			}
			// Compared without its position, which moves with every pool's
			// invocations (state.Pool.Uncovered).
			pos := ps.InvokeSeq
			ps.InvokeSeq = nil
			b, err := json.Marshal(ps)
			p := s.Pool(n)
			if err != nil || (string(b) == string(p.LastStatus) && now.Sub(p.StatusAt) < 5*time.Second && !p.Uncovered(*pos)) {
				continue
			}
			ps.UpdatedAt, ps.InvokeSeq = now.UTC(), pos
			full, err := json.Marshal(ps)
			if err != nil {
				continue
			}
			p.LastStatus, p.StatusAt, p.SentSeq = b, now, *pos
			puts = append(puts, put{stream.PoolKey(ps.Namespace, ps.Pool), full})
		}
	})
	for _, p := range puts {
		if _, err := a.cfg.Store.Pools.Put(ctx, p.key, p.b); err != nil {
			a.cfg.Logger.Debug("publish pool status", "pool", p.key, "err", err)
		}
	}
}
