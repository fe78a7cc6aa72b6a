package activator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/tracing"
	"github.com/runplane/runplane/queue/activator/internal/state"
	"github.com/runplane/runplane/queue/stream"
)

// rebuild loads every non-terminal Record and its invocation from the
// stream, so a new leader resumes where the old one stopped.
func (a *Activator) rebuild(ctx context.Context) error {
	st := a.cfg.Store
	w, err := st.Records.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("rebuild: watch records: %w", err)
	}
	defer func() { _ = w.Stop() }()
	type openRec struct {
		rec messages.Record
		rev uint64
	}
	var known []openRec
	unseq := map[string]openRec{} // stream.Key → queued, sequence not recorded yet
	for e := range w.Updates() {
		if e == nil {
			break
		}
		r, err := stream.Decode(e.Value())
		if err != nil || r.State.Terminal() || !a.cfg.Shard.Owns(r.Namespace) {
			continue
		}
		if a.cfg.Shard.Sharded() {
			a.mu.Lock()
			a.filtered[r.Namespace] = true
			a.mu.Unlock()
		}
		if r.Sequence == 0 {
			unseq[stream.Key(r.Namespace, r.InvocationID)] = openRec{r, e.Revision()}
			continue
		}
		known = append(known, openRec{r, e.Revision()})
	}
	_ = w.Stop()
	invs := map[string]messages.Invocation{} // by stream.Key
	seqs := map[string]uint64{}
	traces := map[string]trace.SpanContext{} // by stream.Key: each message's trace parent (Item.Trace)
	// Past state.FullItems queued invocations of a pool, an invocation is
	// kept light from the start (not only once restored): a new leader's
	// peak memory must not be the whole backlog's payloads.
	queuedOf := map[string]int{} // by pool Key
	light := map[string]bool{}   // by stream.Key
	keep := func(k string, r messages.Record, inv messages.Invocation) messages.Invocation {
		if r.State == messages.StateQueued {
			pk := state.Key(r.Namespace, r.Pool)
			if queuedOf[pk]++; queuedOf[pk] > state.FullItems {
				inv.Payload, inv.Headers, inv.Attributes = nil, nil, nil
				light[k] = true
			}
		}
		return inv
	}
	for _, o := range known {
		m, err := st.Stream.GetMsg(ctx, o.rec.Sequence)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			a.cfg.Logger.Warn("rebuild: invocation missing from stream", "invocation", o.rec.InvocationID, "seq", o.rec.Sequence)
			continue
		case err != nil:
			// Not known missing: left out, its message and Dispatch would
			// be held by nothing and the next purge would take them (review
			// H2). The rebuild fails and Start runs it again.
			return fmt.Errorf("rebuild: read invocation %s at %d: %w", o.rec.InvocationID, o.rec.Sequence, err)
		}
		var inv messages.Invocation
		if err := json.Unmarshal(m.Data, &inv); err != nil {
			continue
		}
		k := stream.Key(o.rec.Namespace, o.rec.InvocationID)
		invs[k], seqs[k] = keep(k, o.rec, inv), o.rec.Sequence
		keepTrace(traces, k, tracing.FromNATS(m.Header))
	}
	if len(unseq) > 0 {
		// The Record learns its sequence at dispatch: find queued
		// invocations in the stream. Those the invoke consumer has not
		// delivered yet turn up here too; it acks them as known.
		since := a.cfg.Clock.Now()
		pools := map[string]bool{}
		for _, o := range unseq {
			since = minTime(since, o.rec.AcceptedAt)
			pools[st.Subjects.Invoke(o.rec.Namespace, o.rec.Pool)] = true
		}
		var subjects []string
		for subj := range pools {
			subjects = append(subjects, subj)
		}
		err := scan(ctx, st, subjects, since, func(m jetstream.Msg, seq uint64) {
			var inv messages.Invocation
			if json.Unmarshal(m.Data(), &inv) != nil {
				return
			}
			k := stream.Key(inv.Namespace, inv.InvocationID)
			if o, ok := unseq[k]; ok && o.rec.Pool == inv.Pool {
				if _, dup := invs[k]; !dup {
					invs[k], seqs[k] = keep(k, o.rec, inv), seq
					keepTrace(traces, k, tracing.FromNATS(m.Headers()))
					known = append(known, o)
				}
			}
		})
		if err != nil {
			return fmt.Errorf("rebuild: %w", err)
		}
		// A queued Record with no message was never accepted: its ingress
		// died (or lost NATS) between the Record and the publish, and its
		// caller got no 202. It is removed, so the ID is free again (a
		// retry may also have published it meanwhile: see repairOrphan).
		for k, o := range unseq {
			if _, ok := invs[k]; !ok {
				a.wg.Go(func() { a.repairOrphan(ctx, o.rec, o.rev) })
			}
		}
	}
	// A dispatched attempt is published again only when its Dispatch is
	// not in the stream: the Record is written first, and the old leader
	// may have died before publishing. Republishing one that is there would
	// hand the worker a second copy once the duplicate window is over.
	published := map[string]uint64{} // Dispatch publish ID → stream sequence
	tokens := map[string]string{}    // Dispatch publish ID → its ResultToken
	var subjects []string
	since := a.cfg.Clock.Now()
	for _, o := range known {
		// Running attempts are scanned too: only their Dispatch holds the
		// result token that tells their worker's result from a forgery.
		if (o.rec.State == messages.StateDispatched || o.rec.State == messages.StateRunning) && o.rec.Worker != "" {
			subjects = append(subjects, st.Subjects.Dispatch(o.rec.Namespace, o.rec.Pool, o.rec.Worker))
			since = minTime(since, o.rec.UpdatedAt)
			published[messages.DispatchPublishID(o.rec.Namespace, o.rec.InvocationID, o.rec.Attempt)] = 0
		}
	}
	if len(subjects) > 0 {
		slices.Sort(subjects)
		err := scan(ctx, st, slices.Compact(subjects), since, func(m jetstream.Msg, seq uint64) {
			if id := m.Headers().Get(jetstream.MsgIDHeader); id != "" {
				if _, ok := published[id]; ok {
					published[id] = seq
					var d messages.Dispatch
					if json.Unmarshal(m.Data(), &d) == nil && d.ResultToken != "" {
						tokens[id] = d.ResultToken
					}
				}
			}
		})
		if err != nil {
			return fmt.Errorf("rebuild: %w", err)
		}
	}

	n, republished := 0, 0
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, o := range known {
		r := o.rec
		k := stream.Key(r.Namespace, r.InvocationID)
		inv, ok := invs[k]
		if !ok {
			continue
		}
		// Assume a recorded worker still runs it; heartbeats confirm it, or
		// it is declared lost after HeartbeatTimeout and redelivered.
		it := &state.Item{Inv: inv, Seq: seqs[k], Attempt: r.Attempt, Rec: messages.Cached{Record: r, Rev: o.rev}}
		it.Trace = traces[k]
		if light[k] {
			it.Lighten()
		}
		a.st.Restore(it, r)
		if seq := published[messages.DispatchPublishID(r.Namespace, r.InvocationID, r.Attempt)]; seq != 0 {
			a.st.Found(it, r.Worker, seq)
		}
		if tok := tokens[messages.DispatchPublishID(r.Namespace, r.InvocationID, r.Attempt)]; r.State == messages.StateRunning && tok != "" {
			a.st.SetResultToken(it, r.Attempt, tok)
		}
		if r.State == messages.StateDispatched && r.Worker != "" {
			if seq := published[messages.DispatchPublishID(r.Namespace, r.InvocationID, r.Attempt)]; seq != 0 {
				it.DispatchSeq = seq
				if tok := tokens[messages.DispatchPublishID(r.Namespace, r.InvocationID, r.Attempt)]; tok != "" {
					a.st.SetResultToken(it, r.Attempt, tok)
				}
			} else {
				republished++
				// Its deadline counts from this publish (the Dispatch
				// carries it), not from the lost one's.
				it.DispatchedAt = a.cfg.Clock.Now()
				a.wg.Go(func() {
					if err := a.publishDispatch(ctx, it, it.Inv, r.Worker, r.Attempt); err != nil {
						a.cfg.Logger.Warn("rebuild: republish dispatch failed", "invocation", r.InvocationID, "err", err)
					}
				})
			}
		}
		n++
	}
	a.cfg.Logger.Info("activator rebuilt state", "invocations", n, "republished", republished)
	return nil
}

// OrphanGrace is how long after its acceptedAt a queued Record without a
// stream message is left alone: an ingress may still be publishing it
// (its publish times out well within it).
const OrphanGrace = 30 * time.Second

// repairOrphan removes the Record rec (revision rev) of an accept that was
// cut off between the Record and its publish, once OrphanGrace has passed
// since it was accepted, unless the invocation has come in meanwhile (a
// retry republishes it) or the Record changed. The delete is a
// compare-and-set on rev: a Record anyone wrote since is kept. Removing it
// loses nothing: no caller was told it was accepted, and a message that
// arrives after all creates the Record at dispatch.
func (a *Activator) repairOrphan(ctx context.Context, rec messages.Record, rev uint64) {
	key := stream.Key(rec.Namespace, rec.InvocationID)
	if wait := rec.AcceptedAt.Add(OrphanGrace).Sub(a.cfg.Clock.Now()); wait > 0 {
		select {
		case <-ctx.Done():
			return
		case <-a.cfg.Clock.After(wait):
		}
	}
	var open bool
	a.locked(func(s *state.State) { open = s.Item(state.Key(rec.Namespace, rec.InvocationID)) != nil })
	if open {
		return
	}
	err := a.cfg.Store.Records.Delete(ctx, key, jetstream.LastRevision(rev))
	switch {
	case err == nil:
		a.metrics.orphans.Inc()
		a.cfg.Logger.Warn("removed the Record of an accept cut off before its publish (its caller got no 202)", "invocation", key, "acceptedAt", rec.AcceptedAt)
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch), errors.Is(err, jetstream.ErrKeyNotFound):
		// Written or removed since: no longer an orphan.
	default:
		a.cfg.Logger.Warn("could not remove the Record of a cut-off accept; it stays queued until it expires", "invocation", key, "err", err)
	}
}

// scanSlack covers clock skew between the writers of Record times and the
// NATS server that stamps stream messages.
const scanSlack = time.Minute

// scan calls fn with every message on subjects stored since since (less
// scanSlack), oldest first, up to the end of the stream.
func scan(ctx context.Context, st *stream.Store, subjects []string, since time.Time, fn func(m jetstream.Msg, seq uint64)) error {
	start := since.Add(-scanSlack)
	c, err := st.Stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: subjects,
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start})
	if err != nil {
		return fmt.Errorf("scan %v: %w", subjects, err)
	}
	for ctx.Err() == nil {
		batch, err := c.FetchNoWait(500)
		if err != nil {
			return fmt.Errorf("scan %v: %w", subjects, err)
		}
		got, last := 0, false
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			fn(m, md.Sequence.Stream)
			last = md.NumPending == 0
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("scan %v: %w", subjects, err)
		}
		if got == 0 || last {
			return nil
		}
	}
	return ctx.Err()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
