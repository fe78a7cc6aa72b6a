package sidecar

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// fetchLoop runs the worker's one fetcher until ctx ends and returns a
// channel closed once it and every invocation it started are done.
//
// The fetcher reserves the slots free at that moment (at least one, waiting
// for it) and pulls that many dispatches in one request, handing each to its
// own goroutine as it arrives; a slot comes back when its invocation ends,
// and the reservations a pull did not fill when it ends. So an idle worker
// keeps one pull request open (not one per slot, each renewed every
// FetchWait), a busy one pulls its dispatches in batches, and a dispatch
// never waits pulled for a slot: it would sit unacked, neither run nor
// handed back. Fetch, not the library's Consume or Messages: those keep a
// buffer of PullMaxMessages that they refill on their own, however many
// slots are free, and cannot be resized without stopping them.
//
// A pull still open when ctx ends is read to its end and whatever it brings
// is handed back (handBack), neither run nor left for the ack wait.
func (s *Sidecar) fetchLoop(ctx, invCtx context.Context, cons jetstream.Consumer) <-chan struct{} {
	free := make(chan struct{}, s.cfg.Concurrency) // one token per free slot
	for range s.cfg.Concurrency {
		free <- struct{}{}
	}
	// A server limit on a pull's batch (jetstream.limits.max_request_batch
	// of an external NATS, copied into the consumer's configuration): a
	// larger pull is refused with 409, which retried as it was stopped the
	// worker taking any work (review finding).
	maxBatch := s.cfg.Concurrency
	if info := cons.CachedInfo(); info != nil && info.Config.MaxRequestBatch > 0 {
		maxBatch = min(maxBatch, info.Config.MaxRequestBatch)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		defer wg.Wait()
		start := func(msg jetstream.Msg) {
			wg.Add(1)
			go func() {
				defer func() { free <- struct{}{}; wg.Done() }()
				s.handle(invCtx, msg)
			}()
		}
		for ctx.Err() == nil {
			if !s.ready.Load() {
				select {
				case <-ctx.Done():
				case <-s.wakeFetch:
				case <-time.After(s.cfg.ProbeInterval):
				}
				continue
			}
			n := reserve(ctx, free)
			if n == 0 {
				continue // ctx ended
			}
			if n > maxBatch {
				release(free, n-maxBatch)
				n = maxBatch
			}
			if !s.ready.Load() {
				// Became unready while every slot was busy.
				release(free, n)
				continue
			}
			if err := s.pull(ctx, cons, n, free, start); err != nil {
				s.log.Warn("fetch dispatch", "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
			}
		}
	}()
	return done
}

// pull makes one pull request for the n slots reserved in free and starts
// each dispatch it brings (or hands it back once ctx ended), returning the
// slots it did not fill.
func (s *Sidecar) pull(ctx context.Context, cons jetstream.Consumer, n int, free chan<- struct{}, start func(jetstream.Msg)) error {
	batch, err := cons.Fetch(n, jetstream.FetchMaxWait(s.cfg.FetchWait))
	if err != nil {
		release(free, n)
		return err
	}
	for msg := range batch.Messages() {
		n--
		if ctx.Err() != nil {
			// Arrived on a pull made before the drain began.
			s.handBack(msg)
			free <- struct{}{}
			continue
		}
		start(msg)
	}
	release(free, n)
	// The library reports neither an expiry nor an empty pull as an error.
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
		return err
	}
	return nil
}

// reserve takes every free slot's token, waiting for the first one; 0 when
// ctx ends first.
func reserve(ctx context.Context, free <-chan struct{}) int {
	select {
	case <-ctx.Done():
		return 0
	case <-free:
	}
	n := 1
	for {
		select {
		case <-free:
			n++
		default:
			return n
		}
	}
}

// release gives n slot tokens back.
func release(free chan<- struct{}, n int) {
	for range n {
		free <- struct{}{}
	}
}
