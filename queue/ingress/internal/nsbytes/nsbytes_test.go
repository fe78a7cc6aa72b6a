package nsbytes

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/runplane/runplane/internal/messages"
)

const ttl = time.Hour

func rec(state messages.State, attempt int, streamBytes int64) messages.Record {
	return messages.Record{State: state, Attempt: attempt, StreamBytes: streamBytes}
}

func putRec(u *Usage, key string, size int, created time.Time, r messages.Record) {
	u.Put(key, size, created, ShapeOf(r))
}

func TestShares(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type put struct {
		key  string
		size int
		r    messages.Record
	}
	for _, tc := range []struct {
		name          string
		puts          []put
		deletes       []string
		stream, recs  int64 // of namespace a
		otherNSStream int64 // of namespace b
	}{
		{name: "queued holds its message and room for its first dispatch", puts: []put{{"a.1", 100, rec(messages.StateQueued, 0, 1000)}},
			stream: 2000, recs: 100 + 3 + RecordOverhead},
		{name: "each attempt's dispatch counts", puts: []put{{"a.1", 100, rec(messages.StateRunning, 2, 1000)}},
			stream: 3000, recs: 100 + 3 + RecordOverhead},
		{name: "a rewrite replaces", puts: []put{{"a.1", 100, rec(messages.StateQueued, 0, 1000)}, {"a.1", 200, rec(messages.StateDispatched, 1, 1000)}},
			stream: 2000, recs: 200 + 3 + RecordOverhead},
		{name: "finished leaves the stream, its Record stays", puts: []put{{"a.1", 100, rec(messages.StateQueued, 0, 1000)}, {"a.1", 500, rec(messages.StateSucceeded, 1, 0)}},
			stream: 0, recs: 500 + 3 + RecordOverhead},
		{name: "cancelled counts until cleared", puts: []put{{"a.1", 100, rec(messages.StateQueued, 0, 1000)}, {"a.1", 120, rec(messages.StateCancelled, 0, 1000)}},
			stream: 2000, recs: 120 + 3 + RecordOverhead},
		{name: "cleared cancel", puts: []put{{"a.1", 120, rec(messages.StateCancelled, 0, 1000)}, {"a.1", 110, rec(messages.StateCancelled, 0, 0)}},
			stream: 0, recs: 110 + 3 + RecordOverhead},
		{name: "a dead letter stays with its Record", puts: []put{{"a.1", 100, rec(messages.StateDeadLettered, 3, 1000)}},
			stream: 1000, recs: 100 + 3 + RecordOverhead},
		{name: "a deleted open Record goes", puts: []put{{"a.1", 100, rec(messages.StateQueued, 0, 1000)}}, deletes: []string{"a.1"}},
		{name: "namespaces are apart", puts: []put{{"a.1", 100, rec(messages.StateQueued, 0, 1000)}, {"b.1", 100, rec(messages.StateQueued, 0, 7000)}},
			stream: 2000, recs: 100 + 3 + RecordOverhead, otherNSStream: 14000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := New(clocktesting.NewFakePassiveClock(t0), ttl)
			for _, p := range tc.puts {
				putRec(u, p.key, p.size, t0, p.r)
			}
			for _, k := range tc.deletes {
				u.Delete(k)
			}
			got := u.Of("a")
			assert.Equal(t, tc.stream, got.Stream, "stream")
			assert.Equal(t, tc.recs, got.Records, "records")
			assert.Equal(t, tc.otherNSStream, u.Of("b").Stream)
		})
	}
}

// TestSettledRecordsExpire: a settled Record's bytes go when it expires (a
// TTL after its last write), in per-minute sums that never go early.
func TestSettledRecordsExpire(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(t0)
	u := New(clk, ttl)
	putRec(u, "a.1", 1000, t0, rec(messages.StateSucceeded, 1, 0))
	putRec(u, "a.2", 1000, t0.Add(30*time.Second), rec(messages.StateSucceeded, 1, 0)) // shares a.1's slot
	putRec(u, "a.3", 1000, t0.Add(5*time.Minute), rec(messages.StateSucceeded, 1, 0))
	per := int64(1000 + 3 + RecordOverhead)
	require.Equal(t, 3*per, u.Of("a").Records)
	require.Equal(t, t0.Add(ttl+30*time.Second), u.Of("a").NextExpiry, "the slot goes at its latest expiry")

	clk.SetTime(t0.Add(ttl + 29*time.Second))
	require.Equal(t, 3*per, u.Of("a").Records, "a.1 shares a.2's slot: kept until a.2 expires")
	clk.SetTime(t0.Add(ttl + 30*time.Second))
	require.Equal(t, per, u.Of("a").Records)
	clk.SetTime(t0.Add(ttl + 5*time.Minute))
	require.Zero(t, u.Of("a").Records)
	require.True(t, u.Of("a").NextExpiry.IsZero())
}

// TestCallbackPendingIsStillChanging: a final Record with a callback to
// deliver is counted at its latest size, not once per write.
func TestCallbackPendingIsStillChanging(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	u := New(clocktesting.NewFakePassiveClock(t0), ttl)
	r := rec(messages.StateSucceeded, 1, 0)
	r.Callback = &messages.CallbackStatus{State: messages.CallbackPending}
	putRec(u, "a.1", 1000, t0, r)
	putRec(u, "a.1", 1100, t0, r)
	r.Callback.State = messages.CallbackDelivered
	putRec(u, "a.1", 1200, t0, r)
	require.Equal(t, int64(1200+3+RecordOverhead), u.Of("a").Records)
}

// TestReserve: an accept under way counts until its Record is delivered
// (Put) or it is released; one that does not fit is refused and counts
// nothing.
func TestReserve(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(t0)
	u := New(clk, ttl)
	putRec(u, "a.1", 100, t0, rec(messages.StateDispatched, 1, 300))
	_, ok, release := u.Reserve("a.2", 300, 10, 1000, 0)
	require.True(t, ok)
	require.Equal(t, int64(900), u.Of("a").Stream)
	tot, ok, _ := u.Reserve("a.3", 200, 10, 1000, 0)
	require.False(t, ok, "900 + 200 > 1000")
	require.Equal(t, int64(900), tot.Stream)
	_, ok, _ = u.Reserve("b.1", 1000, 10, 1000, 0)
	require.True(t, ok, "another namespace has its own share")
	release()
	release() // once
	require.Equal(t, int64(600), u.Of("a").Stream)
	_, ok, _ = u.Reserve("a.4", 1, 1<<40, 0, 0)
	require.True(t, ok, "0: unbounded")

	// Held until the watch delivers the Record, which then counts it
	// (once); a release after that gives nothing back twice.
	u = New(clk, ttl)
	_, ok, release = u.Reserve("a.5", 400, 10, 1000, 0)
	require.True(t, ok)
	putRec(u, "a.5", 100, t0, rec(messages.StateQueued, 0, 200))
	require.Equal(t, int64(400), u.Of("a").Stream, "the Record's count replaces the reservation")
	release()
	require.Equal(t, int64(400), u.Of("a").Stream)

	// One whose Record never comes goes after reserveHold.
	_, ok, _ = u.Reserve("a.6", 300, 10, 1000, 0)
	require.True(t, ok)
	require.Equal(t, int64(700), u.Of("a").Stream)
	clk.SetTime(t0.Add(reserveHold))
	require.Equal(t, int64(400), u.Of("a").Stream)
}

// TestReserveConcurrently: concurrent accepts cannot both take the last
// room (the check and the count are one step; the old two-step Reserve
// overshot within a few dozen rounds). Run with -race.
func TestReserveConcurrently(t *testing.T) {
	const n, each, budget = 64, 100, 1000
	for round := range 300 {
		u := New(clocktesting.NewFakePassiveClock(time.Now()), ttl)
		var wg sync.WaitGroup
		var fits atomic.Int64
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				if _, ok, _ := u.Reserve(fmt.Sprintf("a.%d", i), each, 1, budget, 0); ok {
					fits.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		require.EqualValues(t, budget/each, fits.Load(), "round %d", round)
		require.EqualValues(t, budget, u.Of("a").Stream, "round %d", round)
	}
}
