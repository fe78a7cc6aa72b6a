package ingress

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// New invocations are refused (503) once a bounded invocation stream holds
// StreamAcceptPercent of its bound, or the Records bucket
// RecordsAcceptPercent of its own: the rest is kept for the work already
// accepted. Each accepted invocation needs a Dispatch of about its size in
// the same stream (somewhat larger, and more than one when it is
// redelivered: 40% leaves room for 1.5 of them), and each Record its updates — a store filled to its
// bound with new work could not dispatch or finish what it holds.
const (
	StreamAcceptPercent  = 40
	RecordsAcceptPercent = 90
)

// storeCheckEvery bounds how often the guard reads the stream and bucket
// info (one request each): between two reads, the last answer holds.
const storeCheckEvery = 250 * time.Millisecond

// storeGuard caches whether the store has room for new work.
type storeGuard struct {
	mu      sync.Mutex
	checked time.Time
	full    string // why the store takes no new work, "" when it does
	// used and max are the stream's bytes and bound at the last read,
	// added what this replica stored since: a burst between two reads
	// cannot overshoot.
	used, added uint64
	max         int64
}

// note counts n bytes this replica stored in the stream since the last
// read.
func (s *Server) note(n int) {
	g := &s.guard
	g.mu.Lock()
	defer g.mu.Unlock()
	g.added += uint64(n)
	if g.full == "" && g.max > 0 && g.used+g.added >= uint64(g.max)/100*StreamAcceptPercent {
		g.full = fmt.Sprintf("invocation stream %s holds about %d of its %d bytes (new invocations are refused above %d%%, to leave room for the work already accepted); retry later",
			s.cfg.Store.Config.Stream, g.used+g.added, g.max, StreamAcceptPercent)
	}
}

// storeFull says why new work cannot be taken ("" when it can). Only
// bounded resources are read; an unbounded store is never full here (the
// server's own limits answer the publish).
func (s *Server) storeFull(ctx context.Context) string {
	st := s.cfg.Store
	if st.Config.MaxBytes <= 0 && st.Config.RecordsMaxBytes <= 0 {
		return ""
	}
	g := &s.guard
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.checked) < storeCheckEvery {
		return g.full
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	g.full = ""
	over := func(what string, used uint64, max int64, pct uint64) bool {
		if max <= 0 || used < uint64(max)/100*pct {
			return false
		}
		g.full = fmt.Sprintf("%s holds %d of its %d bytes (new invocations are refused above %d%%, to leave room for the work already accepted); retry later",
			what, used, max, pct)
		return true
	}
	if st.Config.MaxBytes > 0 {
		if info, err := st.Stream.Info(ctx); err == nil {
			g.used, g.added, g.max = info.State.Bytes, 0, info.Config.MaxBytes
			if over("invocation stream "+st.Config.Stream, info.State.Bytes, info.Config.MaxBytes, StreamAcceptPercent) {
				g.checked = time.Now()
				return g.full
			}
		}
	}
	if st.Config.RecordsMaxBytes > 0 {
		if status, err := st.Records.Status(ctx); err == nil {
			max := st.Config.RecordsMaxBytes
			if ks, ok := status.(*jetstream.KeyValueBucketStatus); ok {
				max = ks.StreamInfo().Config.MaxBytes
			}
			over("Records bucket "+st.Config.RecordsBucket, status.Bytes(), max, RecordsAcceptPercent)
		}
	}
	g.checked = time.Now()
	return g.full
}

// storeFullError is accept's answer while the store takes no new work.
type storeFullError struct{ why string }

func (e *storeFullError) Error() string { return "the invocation store is full: " + e.why }
