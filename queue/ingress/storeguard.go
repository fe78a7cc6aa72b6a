package ingress

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/queue/ingress/internal/nsbytes"
)

// Once a bounded invocation stream holds StreamAcceptPercent of its bound,
// or the Records bucket RecordsAcceptPercent of its own, every namespace's
// new work is refused: the rest is kept for the work already accepted —
// each accepted invocation needs a Dispatch of about its size in the same
// stream (more than one when it is redelivered: 40% leaves room for 1.5 of
// them), and each Record its updates; a store filled to its bound with new
// work could not dispatch or finish what it holds.
//
// From StreamFairPercent (RecordsFairPercent) on, only the namespaces
// holding their fair share of that point or more (the point divided by the
// namespaces holding some) are refused: a few tenants at their budgets
// stop there, and the band above is left to the namespaces holding little
// — they do not all reach the point where everyone is refused.
const (
	StreamFairPercent    = 30
	StreamAcceptPercent  = 40
	RecordsFairPercent   = 80
	RecordsAcceptPercent = 90
)

// storeCheckEvery bounds how often the guard reads the stream and bucket
// info (one request each): between two reads, the last answer holds.
const storeCheckEvery = 250 * time.Millisecond

// level is what a bounded resource holds, and its bound (0: unbounded or
// unread), at the last read.
type level struct {
	used uint64
	max  int64
}

// storeGuard caches how full the store is.
type storeGuard struct {
	mu      sync.Mutex
	checked time.Time
	stream  level
	records level
	// added is what this replica stored in the stream since the last read:
	// a burst between two reads cannot overshoot.
	added uint64
}

// note counts n bytes this replica stored in the stream since the last
// read.
func (s *Server) note(n int) {
	g := &s.guard
	g.mu.Lock()
	defer g.mu.Unlock()
	g.added += uint64(n)
}

// storeFull says why namespace ns may not add new work now ("" when it
// may). Only bounded resources are read; an unbounded store is never full
// here (the server's own limits answer the publish).
func (s *Server) storeFull(ctx context.Context, ns string) string {
	st := s.cfg.Store
	if st.Config.MaxBytes <= 0 && st.Config.RecordsMaxBytes <= 0 {
		return ""
	}
	stream, records := s.storeLevels(ctx)
	var activeStream, activeRecords int
	if s.usage != nil {
		activeStream, activeRecords = s.usage.Active()
	}
	if why := s.overShare(ns, "invocation stream "+st.Config.Stream, stream, StreamFairPercent, StreamAcceptPercent, activeStream,
		func(t nsbytes.Total) int64 { return t.Stream }); why != "" {
		return why
	}
	return s.overShare(ns, "Records bucket "+st.Config.RecordsBucket, records, RecordsFairPercent, RecordsAcceptPercent, activeRecords,
		func(t nsbytes.Total) int64 { return t.Records })
}

// overShare says why ns may not add to what (at l) past pct of its bound:
// it holds its fair share of it or more (share reads ns's from its Total;
// active namespaces hold some), or the store is past hardPct.
func (s *Server) overShare(ns, what string, l level, pct, hardPct uint64, active int, share func(nsbytes.Total) int64) string {
	if l.max <= 0 || l.used < uint64(l.max)/100*pct {
		return ""
	}
	if l.used >= uint64(l.max)/100*hardPct || s.usage == nil {
		return fmt.Sprintf("%s holds %d of its %d bytes (new invocations are refused above %d%%, to leave room for the work already accepted); retry later",
			what, l.used, l.max, max(hardPct, pct))
	}
	fair := int64(uint64(l.max)/100*pct) / int64(max(active, 1))
	held := share(s.usage.Of(ns))
	if held < fair {
		return ""
	}
	return fmt.Sprintf("%s holds %d of its %d bytes, above %d%%: namespace %q holds %d of them, at least its fair share of %d "+
		"(%d%% shared by the %d namespaces holding some; the rest is kept for the work already accepted); retry when some of its invocations have finished",
		what, l.used, l.max, pct, ns, held, fair, pct, max(active, 1))
}

// storeLevels reads the stream's and the bucket's levels, at most every
// storeCheckEvery; the stream's with what this replica stored since.
func (s *Server) storeLevels(ctx context.Context) (stream, records level) {
	st := s.cfg.Store
	g := &s.guard
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.checked) >= storeCheckEvery {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if st.Config.MaxBytes > 0 {
			if info, err := st.Stream.Info(ctx); err == nil {
				g.stream, g.added = level{used: info.State.Bytes, max: info.Config.MaxBytes}, 0
			}
		}
		if st.Config.RecordsMaxBytes > 0 {
			if status, err := st.Records.Status(ctx); err == nil {
				max := st.Config.RecordsMaxBytes
				if ks, ok := status.(*jetstream.KeyValueBucketStatus); ok {
					max = ks.StreamInfo().Config.MaxBytes
				}
				g.records = level{used: status.Bytes(), max: max}
			}
		}
		g.checked = time.Now()
	}
	stream = g.stream
	stream.used += g.added
	return stream, g.records
}

// storeFullError is accept's answer while the store takes no new work
// from the namespace.
type storeFullError struct{ why string }

func (e *storeFullError) Error() string { return "the invocation store is full: " + e.why }
