package activator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/poolpolicy"
	"github.com/runplane/runplane/queue/activator/internal/state"
	"github.com/runplane/runplane/queue/stream"
)

// retryPolicy is the retry policy of pool ns/name: none for a pool that is
// unknown or claimed by several Deployments.
func (a *Activator) retryPolicy(ns, name string) poolpolicy.Retry {
	pl, ok := a.cfg.Pools.Lookup(ns, name)
	if !ok || len(pl.Conflict) > 0 {
		return poolpolicy.Retry{}
	}
	return pl.Policy.Retry
}

// statusCode is the framework response's status code of res (0: none).
func statusCode(res messages.Result) int {
	if res.Response == nil {
		return 0
	}
	return res.Response.StatusCode
}

// outcomeOf is how res's attempt ended, for Record.Attempts.
func outcomeOf(res messages.Result) messages.AttemptOutcome {
	return messages.AttemptOutcome{Attempt: res.Attempt, Worker: res.Worker, State: res.State, StatusCode: statusCode(res),
		Error: res.Error, StartedAt: res.StartedAt, FinishedAt: res.FinishedAt}
}

// recordRetry writes the retried attempt's outcome into the Record, which
// goes back to queued (the next attempt's dispatch moves it on), then acks
// the result m. A failed write is logged: the retry stands (the state has
// it), and a redelivered copy of the result would be refused as retried.
func (a *Activator) recordRetry(ctx context.Context, m jetstream.Msg, it *state.Item, res messages.Result, retries int, delay time.Duration) {
	at := a.cfg.Clock.Now().Add(delay).UTC()
	o := outcomeOf(res)
	o.RetryAt = &at
	_, err := a.write(ctx, it, func(c *messages.Cached) (bool, error) {
		return a.cfg.Store.UpdateCached(ctx, stream.Key(res.Namespace, res.InvocationID), c, func(r *messages.Record) bool {
			if r.Pool != res.Pool || r.State.Terminal() {
				return false
			}
			r.Attempts = append(r.Attempts, o)
			r.Retries = max(r.Retries, retries)
			if r.Attempt == res.Attempt {
				// Not dispatched again yet (else that write moved it on).
				r.State = messages.StateQueued
			}
			return true
		})
	})
	if err != nil {
		a.cfg.Logger.Warn("retry: record update failed; the retry stands", "invocation", res.InvocationID, "attempt", res.Attempt, "err", err)
	}
	a.metrics.retried.WithLabelValues(res.Namespace, res.Pool).Inc()
	a.acked("results", "ack", m, m.Ack())
}

// retriesExhausted ends an invocation whose last allowed attempt failed as
// the retry policy matches: the attempt's outcome and response go into the
// Record, then it is dead-lettered with the reason. The result m is acked
// once the Record is final; on shutdown it is left to the next leader,
// which decides the same.
func (a *Activator) retriesExhausted(ctx context.Context, m jetstream.Msg, it *state.Item, res messages.Result, pol poolpolicy.Retry) {
	reason := fmt.Sprintf("retries exhausted: %d attempts failed (%s); last attempt %d on %s: %s %s",
		it.Retries+1, pol, res.Attempt, res.Worker, res.State, res.Error)
	if code := statusCode(res); code != 0 {
		reason += fmt.Sprintf(" (status %d)", code)
	}
	_, err := a.write(ctx, it, func(c *messages.Cached) (bool, error) {
		return a.cfg.Store.UpdateCached(ctx, stream.Key(res.Namespace, res.InvocationID), c, func(r *messages.Record) bool {
			if r.Pool != res.Pool || r.State.Terminal() {
				return false
			}
			r.Attempts = append(r.Attempts, outcomeOf(res))
			r.Response = res.Response
			return true
		})
	})
	if err != nil {
		a.cfg.Logger.Warn("retries exhausted: record update failed; redelivering the result", "invocation", res.InvocationID, "err", err)
		a.acked("results", "nak", m, m.NakWithDelay(500*time.Millisecond))
		return
	}
	a.deadLetter(ctx, it, reason)
	if ctx.Err() != nil {
		return
	}
	a.acked("results", "ack", m, m.Ack())
}

// recordHandBack notes in the Record that a draining worker gave attempt
// ev.Attempt back unstarted (the Record goes back to queued unless the next
// attempt's dispatch got there first) and deletes that attempt's Dispatch,
// so a restarted worker of the same name never runs it.
func (a *Activator) recordHandBack(ctx context.Context, it *state.Item, ev messages.Event, staleDispatch uint64) {
	st := a.cfg.Store
	if staleDispatch != 0 {
		if err := st.DeleteMsg(ctx, staleDispatch); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			a.cfg.Logger.Debug("hand back: delete abandoned dispatch", "invocation", ev.InvocationID, "seq", staleDispatch, "err", err)
		}
	}
	o := messages.AttemptOutcome{Attempt: ev.Attempt, Worker: ev.Worker, State: messages.AttemptHandedBack, FinishedAt: ev.At}
	_, err := a.write(ctx, it, func(c *messages.Cached) (bool, error) {
		return st.UpdateCached(ctx, stream.Key(ev.Namespace, ev.InvocationID), c, func(r *messages.Record) bool {
			if r.Pool != ev.Pool || r.State.Terminal() {
				return false
			}
			r.Attempts = append(r.Attempts, o)
			if r.Attempt == ev.Attempt {
				r.State = messages.StateQueued
			}
			return true
		})
	})
	if err != nil {
		a.cfg.Logger.Warn("hand back: record update failed; the redelivery stands", "invocation", ev.InvocationID, "err", err)
	}
}
