package activator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/queue/activator/internal/state"
)

// DefaultPurgeEvery is the default of Config.PurgeEvery.
//
// Why batches, and why this period: a final invocation's messages used to
// be deleted one by one, two JetStream API requests per call (~6–7% of a
// call's CPU with their JSON, queue/README.md "Where a call's CPU goes").
// One purge per subject removes every final message below the subject's
// floor in one request; a round costs one consumer-info request (the
// invoke consumer's ack floor) and a purge per subject with finished work
// (a pool's invoke subject, each worker's dispatch subject). At 1,000
// calls/s over one pool and two workers that is ~40 requests/s for 2,000
// messages instead of 2,000 requests, and a finished message stays at
// most one period (plus the round) longer than before: at the 16 MiB
// stream of TestFinishedWorkLeavesTheStream, well within the store guard.
const DefaultPurgeEvery = 100 * time.Millisecond

// kickPurge asks the purge loop for a round.
func (a *Activator) kickPurge() {
	select {
	case a.purgeKick <- struct{}{}:
	default:
	}
}

// purgeLoop removes finished work from the invocation stream in batches:
// a round at once when asked (a Record became final) and the stream is
// quiet, at most one per PurgeEvery under load, and again after it while
// some released message waits (behind a held one, FallbackAfter).
func (a *Activator) purgeLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.purgeKick:
		}
		a.purge(ctx)
		select {
		case <-ctx.Done():
			return
		case <-a.cfg.Clock.After(a.cfg.PurgeEvery):
		}
		var more bool
		a.locked(func(s *state.State) { more = s.Removable() })
		if more {
			a.kickPurge()
		}
	}
}

// purge carries out one round of the state's batches (state.Purges).
func (a *Activator) purge(ctx context.Context) {
	var need bool
	a.locked(func(s *state.State) { need = s.InvokeRemovableAbove(a.ackFloor) })
	var roundErrs []error
	if need {
		var err error
		if a.ackFloor, a.ackFloorGen, err = a.invokeAckFloor(ctx); err != nil {
			roundErrs = append(roundErrs, err)
		}
	}
	var ps []state.Purge
	a.locked(func(s *state.State) { ps = s.Purges(a.usableAckFloor()) })
	st := a.cfg.Store.Stream
	for _, p := range ps {
		subject := a.natsSubject(p.Subject)
		var errs []error
		if p.Below != 0 {
			if err := st.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(p.Below)); err != nil {
				if ctx.Err() == nil {
					a.metrics.purgeErrors.WithLabelValues("purge").Inc()
				}
				errs = append(errs, fmt.Errorf("purge %s below %d: %w", subject, p.Below, err))
			}
		}
		for _, seq := range p.Delete {
			if err := a.cfg.Store.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				if ctx.Err() == nil {
					a.metrics.purgeErrors.WithLabelValues("delete").Inc()
				}
				errs = append(errs, fmt.Errorf("delete %s at %d: %w", subject, seq, err))
			}
		}
		if err := errors.Join(errs...); err != nil {
			// Tried again next round; the sweep is the last resort.
			roundErrs = append(roundErrs, err)
			continue
		}
		a.locked(func(s *state.State) { s.Purged(p) })
		a.metrics.removed.WithLabelValues("final").Add(float64(p.Removed))
	}
	if ctx.Err() != nil {
		// Stopping (shutdown, the Lease or shard lost): what the round's
		// requests failed on is that, not the store.
		return
	}
	// Only on a change, and while it lasts once a minute: a round runs
	// every PurgeEvery, and a purge that keeps failing fills the stream.
	a.purgeFailures.round(a.cfg.Logger, a.cfg.Clock.Now(), errors.Join(roundErrs...))
}

// usableAckFloor is the last ack floor read (invokeAckFloor) while the
// invoke consumer it was read from is still the current one, else 0.
func (a *Activator) usableAckFloor() uint64 {
	if a.invokeGen.Load() != a.ackFloorGen || a.ackFloorGen%2 == 1 {
		// Made again since it was read: its replay starts over.
		a.ackFloor = 0
	}
	return a.ackFloor
}

// invokeAckFloor reads the invoke consumer's ack floor, and the
// generation of the consumer it read it from (invokeGen): every invocation
// message at or below it was delivered and handled (queued here, or found
// final or a copy). 0 (nothing on an invoke subject is purged, only
// deleted one by one) when it cannot be read (err, counted), or while the
// consumer is being made again or was made again during the read
// (durable.remaking: an odd or changed generation).
func (a *Activator) invokeAckFloor(ctx context.Context) (floor, gen uint64, err error) {
	gen = a.invokeGen.Load()
	if gen%2 == 1 {
		return 0, gen, nil
	}
	defer func() {
		if a.invokeGen.Load() != gen {
			floor = 0
		}
	}()
	st := a.cfg.Store
	c, err := st.JS.Consumer(ctx, st.Config.Stream, a.cfg.Shard.consumerPrefix(a.cfg.ConsumerPrefix)+"-invoke")
	if err != nil {
		if ctx.Err() == nil {
			a.metrics.purgeErrors.WithLabelValues("ack_floor").Inc()
		}
		return 0, gen, fmt.Errorf("read the invoke consumer's ack floor: %w", err)
	}
	if info := c.CachedInfo(); info != nil {
		floor = info.AckFloor.Stream
	}
	return floor, gen, nil
}

// natsSubject is the invocation stream subject of sub.
func (a *Activator) natsSubject(sub state.Subject) string {
	subj := a.cfg.Store.Subjects
	if sub.Invoke() {
		return subj.Invoke(sub.Namespace, sub.Pool)
	}
	return subj.Dispatch(sub.Namespace, sub.Pool, sub.Worker)
}

// subjectOf reads an invoke or dispatch subject of the invocation stream.
func (a *Activator) subjectOf(subject string) (state.Subject, bool) {
	subj := a.cfg.Store.Subjects
	if ns, pool, ok := subj.ParseInvoke(subject); ok {
		return state.Subject{Namespace: ns, Pool: pool}, true
	}
	ns, pool, worker, ok := subj.ParseDispatch(subject)
	return state.Subject{Namespace: ns, Pool: pool, Worker: worker}, ok
}
