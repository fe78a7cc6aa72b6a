package state

import (
	"time"

	"github.com/runplane/runplane/internal/messages"
)

// RefusedRetried: the result is of an attempt whose failure was already
// taken and retried (a copy stored twice), or a failure of an attempt
// superseded by a newer one, which decides instead.
const RefusedRetried = "retried"

// RetryDecision is what a failed result that the pool's retry policy
// matches leads to (RetryOf).
type RetryDecision int

const (
	// NoRetry: the invocation is not open here, or the result is not its
	// current attempt's: Result applies as without a policy.
	NoRetry RetryDecision = iota
	// Retried: the invocation is queued again for a new attempt.
	Retried
	// Exhausted: MaxRetries retries were made; the result ends it.
	Exhausted
	// Stale: the failure is of an attempt superseded by a newer one (its
	// worker was lost): the newer attempt decides; the caller refuses it.
	Stale
)

// RetryOf applies a result that the pool's retry policy matches (the
// caller checked Refusal first): while retries remain (maxRetries), the
// worker's slot is freed and the invocation queued again at the head of its
// pool's queue, not before delay, as a new attempt. The retried attempt's
// later copies are refused (RefusedRetried).
func (s *State) RetryOf(res messages.Result, seq uint64, maxRetries int, delay time.Duration) (RetryDecision, *Item) {
	it := s.items[Key(res.Namespace, res.InvocationID)]
	switch {
	case it == nil:
		return NoRetry, nil
	case res.Attempt < it.Attempt:
		return Stale, it
	case it.Attempt != res.Attempt || it.Queued:
		return NoRetry, nil
	}
	if it.Retries >= maxRetries {
		return Exhausted, it
	}
	now := s.clk.Now()
	s.NoteResultSeq(seq)
	p := s.Pool(PoolKey(it.Inv))
	if w := p.Workers[res.Worker]; w != nil {
		w.LastSeen = now
		w.take(res.InvocationID, now)
	}
	if it.Worker != "" && it.Worker != res.Worker {
		if w := p.Workers[it.Worker]; w != nil {
			w.take(res.InvocationID, now)
		}
	}
	it.Retries++
	it.RetriedAttempt, it.RetriedResult = res.Attempt, res.Attempt
	it.Worker, it.Queued, it.Started = "", true, false
	it.NotBefore = now.Add(delay)
	it.DispatchSeq = 0
	p.Queue = append([]*Item{it}, p.Queue...)
	return Retried, it
}

// RestoreRetries takes an open Record's retry bookkeeping into it: a
// Record queued again after a retried failure names the retried attempt,
// and its next attempt waits for the recorded retryAt.
func RestoreRetries(it *Item, r messages.Record) {
	it.Retries = r.Retries
	if r.State == messages.StateQueued && r.Attempt > 0 {
		it.RetriedAttempt = r.Attempt
		if n := len(r.Attempts); n > 0 && r.Attempts[n-1].RetryAt != nil {
			it.NotBefore = *r.Attempts[n-1].RetryAt
			if r.Attempts[n-1].Attempt == r.Attempt {
				// Queued by a retried result, not by a hand-back.
				it.RetriedResult = r.Attempt
			}
		}
	}
}
