package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/sidecar/frameworkclient"
)

// JetStream acknowledgement bodies, sent to a delivery's reply subject.
// Written here because nats.go acks only a jetstream.Msg it delivered to
// this process; after a restart the journal holds just the reply subject
// (the server acks by stream sequence whichever delivery's subject it is).
var (
	ackBody      = []byte("+ACK")
	nakBody      = []byte("-NAK")
	progressBody = []byte("+WPI")
)

// Reasons a call interrupted by a sidecar restart ends without a run.
var (
	errRestartedPlain = errors.New("the worker's sidecar restarted while the framework ran this call; " +
		"the framework does not offer the idempotent invoke, so the call is not run again (at most once)")
	errRestartedUnknown = errors.New("the worker's sidecar restarted while the framework ran this call, " +
		"and the framework no longer knows it (it restarted too, or forgot the outcome); the call is not run again (at most once)")
)

// recoverJournal settles every dispatch a previous run of this sidecar
// left in the journal, at once — not after the consumer's ack wait, using
// each delivery's own reply subject (the server acks by stream sequence,
// whichever delivery's subject it comes on):
//
//   - received, never started: nak'ed, so it is delivered again now;
//   - started: re-attached to the framework's call (idempotent invoke) and
//     its outcome published; a framework without it, or that no longer
//     knows the call, gets a failed Result naming the restart — the call
//     is never started a second time (the pool's retry policy may retry
//     it as a new attempt);
//   - answered: its Result published.
//
// An entry is removed only once its Result is stored and its dispatch
// acked, so a sidecar restarted again meanwhile finds it again. Until
// then its redelivery, should one come, is kept in progress (handle).
func (s *Sidecar) recoverJournal(stop context.Context) {
	found, errs := s.outcomes.load()
	for _, err := range errs {
		s.log.Warn("journal", "err", err)
	}
	for _, oc := range found {
		d := oc.Dispatch
		log := s.log.With("invocation", d.InvocationID, "attempt", d.Attempt)
		if oc.Phase == phaseReceived {
			// Forgotten now, before any pull: a redelivery (the nak's, or
			// the ack wait's during a crash loop) journals under the same
			// name, and a removal after it would drop that live entry.
			s.forget(log, oc.ID)
			s.replays.Go(func() {
				if oc.Reply == "" {
					return
				}
				if err := s.replyAck(stop, oc.Reply, "nak", nakBody); err != nil {
					log.Warn("hand back a dispatch never started before a restart (it comes back after the ack wait)", "err", err)
					return
				}
				log.Info("handed back a dispatch never started before a restart")
			})
			continue
		}
		ex := &execution{attempt: d.Attempt}
		if oc.answered() {
			ex.finish(oc.Result.State)
		}
		replayed := make(chan struct{})
		s.mu.Lock()
		s.replaying[oc.ID] = replayed
		s.held[d.InvocationID] = ex
		s.mu.Unlock()
		s.replays.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.replaying, oc.ID)
				s.mu.Unlock()
				close(replayed)
			}()
			s.settleJournaled(stop, log, oc, ex)
		})
	}
}

// settleJournaled brings entry oc of a previous run to its end: outcome,
// stored Result, acked dispatch, entry removed.
func (s *Sidecar) settleJournaled(stop context.Context, log *slog.Logger, oc outcome, ex *execution) {
	d := oc.Dispatch
	stopProgress := s.keepDelivery(log, oc.Reply)
	defer stopProgress()
	if !oc.answered() {
		log.Info("a call started before a restart: re-attaching to it, never starting it again")
		oc.Result = s.reattach(stop, log, oc)
		oc.Phase = phaseAnswered
		ex.finish(oc.Result.State)
		s.journal(log, oc, true)
		dur := oc.Result.FinishedAt.Sub(oc.Result.StartedAt)
		s.metrics.observe(oc.Result.State, dur)
		s.publishEvent(messages.Event{Type: messages.EventFinished, InvocationID: d.InvocationID, Attempt: d.Attempt, State: oc.Result.State, DurationMS: dur.Milliseconds()})
	} else {
		log.Info("publishing an outcome journaled before a restart; the framework does not run it again", "state", oc.Result.State)
	}
	if !s.publishResult(stop, oc.Result, oc.ID, d) {
		log.Error("journaled result not stored before shutdown", "state", oc.Result.State)
		return
	}
	s.rememberCompleted(oc.ID, d.InvocationID)
	if oc.Reply == "" {
		// An entry of an older sidecar: its redelivery is acked as
		// answered (handle), which removes it.
		return
	}
	stopProgress()
	if err := s.replyAck(stop, oc.Reply, "ack", ackBody); err != nil {
		log.Warn("ack a dispatch settled after a restart; its redelivery is acked as answered", "err", err)
		return
	}
	s.forget(log, oc.ID)
}

// reattach collects the outcome of journaled entry oc, a call the
// framework started before this sidecar restarted, as a Result.
func (s *Sidecar) reattach(stop context.Context, log *slog.Logger, oc outcome) messages.Result {
	d := oc.Dispatch
	ctx, cancel := context.WithCancelCause(stop)
	defer cancel(nil)
	s.mu.Lock()
	s.running[oc.ID] = cancel // a Cancel reaches it (onCancel)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.running, oc.ID)
		s.mu.Unlock()
	}()
	s.inFlight.Add(1)
	s.metrics.inFlight.Inc()
	defer func() { s.inFlight.Add(-1); s.metrics.inFlight.Dec() }()

	started := oc.Result.StartedAt
	callCtx, stopCall := s.callContext(ctx, d, started)
	defer stopCall()
	caps, err := s.waitFramework(callCtx)
	var resp framework.Response
	switch {
	case err != nil:
	case !caps.IdempotentInvoke:
		err = errRestartedPlain
	default:
		resp, err = s.client.Attach(callCtx, s.frameworkRequest(d, nil))
		s.cancelCall(log, callCtx, d)
	}
	switch {
	case errors.Is(err, errRestartedPlain), errors.Is(err, frameworkclient.ErrUnknownCall):
		reason := errRestartedPlain
		if errors.Is(err, frameworkclient.ErrUnknownCall) {
			reason = errRestartedUnknown
		}
		log.Warn("a call interrupted by a restart ends without running again", "reason", reason)
		err = reason
	case refused(err):
		// The framework is not serving: the call died with it.
		err = fmt.Errorf("%w (the framework is not serving: %w)", errRestartedUnknown, err)
	}
	return s.resultOf(callCtx, d, started, resp, err)
}

// waitFramework waits until the framework answers its health check and
// returns its capabilities (or ctx's cause when it ends first).
func (s *Sidecar) waitFramework(ctx context.Context) (frameworkclient.Capabilities, error) {
	for {
		pctx, cancel := context.WithTimeout(ctx, max(s.cfg.ProbeInterval, time.Second))
		caps, err := s.client.Probe(pctx)
		cancel()
		if err == nil {
			return caps, nil
		}
		select {
		case <-ctx.Done():
			return caps, fmt.Errorf("waiting for the framework: %w", context.Cause(ctx))
		case <-time.After(s.unreadyProbe()):
		}
	}
}

// keepDelivery keeps the delivery whose reply subject is reply from
// redelivery (in-progress acks) until the returned stop is called.
func (s *Sidecar) keepDelivery(log *slog.Logger, reply string) (stop func()) {
	if reply == "" {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(s.progressPeriod())
		defer t.Stop()
		for {
			if err := s.nc.Publish(reply, progressBody); err != nil {
				s.acked(log, "in_progress", err)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	var closed bool
	return func() {
		if !closed {
			closed = true
			close(done)
			<-finished
		}
	}
}

// replyAck sends body (an ack, a nak) to a delivery's reply subject and
// waits for the server to confirm it, retrying until stop ends. A consumer
// that is gone (no responders) has nothing left to redeliver: that counts
// as done.
func (s *Sidecar) replyAck(stop context.Context, reply, op string, body []byte) error {
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Cap: maxPublishBackoff, Steps: math.MaxInt32}
	for {
		ctx, cancel := context.WithTimeout(stop, 5*time.Second)
		_, err := s.nc.RequestWithContext(ctx, reply, body)
		cancel()
		if err == nil || errors.Is(err, nats.ErrNoResponders) {
			return nil
		}
		s.metrics.ackErrors.WithLabelValues(op).Inc()
		select {
		case <-stop.Done():
			return fmt.Errorf("%s on %s: %w", body, reply, err)
		case <-time.After(backoff.Step()):
		}
	}
}

// keepUntilReplayed keeps msg, a redelivered dispatch of a journal entry
// being settled, in progress until that ends, then acks it when the
// result was stored (else it is left for the next start) and removes the
// entry once the ack is confirmed.
func (s *Sidecar) keepUntilReplayed(log *slog.Logger, msg jetstream.Msg, id string, replayed <-chan struct{}) {
	go func() {
		t := time.NewTicker(s.progressPeriod())
		defer t.Stop()
		for {
			select {
			case <-replayed:
				s.mu.Lock()
				_, stored := s.completed[id]
				s.mu.Unlock()
				if stored {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					err := msg.DoubleAck(ctx)
					cancel()
					s.acked(log, "ack", err)
					if err == nil {
						s.forget(log, id)
					}
				}
				return
			case <-t.C:
				s.acked(log, "in_progress", msg.InProgress())
			}
		}
	}()
}
