package stream

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/internal/messages"

	"github.com/stretchr/testify/require"

	"github.com/stretchr/testify/assert"
)

func TestAdvance(t *testing.T) {
	q, d, r, s := messages.StateQueued, messages.StateDispatched, messages.StateRunning, messages.StateSucceeded
	tests := []struct {
		cur        messages.State
		curAttempt int
		next       messages.State
		attempt    int
		want       bool
	}{
		{q, 0, d, 1, true},
		{d, 1, r, 1, true},
		{r, 1, d, 1, false},                    // no going back within an attempt
		{r, 1, d, 2, true},                     // redelivery supersedes
		{d, 2, r, 1, false},                    // stale attempt
		{r, 2, s, 1, true},                     // any attempt may finish
		{s, 1, messages.StateFailed, 1, false}, // terminal is final
		{messages.StateCancelled, 0, d, 1, false},
		{q, 0, messages.StateCancelled, 0, true},
	}
	for _, tc := range tests {
		got := Advance(tc.cur, tc.curAttempt, tc.next, tc.attempt)
		assert.Equal(t, tc.want, got, "Advance(%s@%d → %s@%d) = %v, want %v", tc.cur, tc.curAttempt, tc.next, tc.attempt, got, tc.want)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		c    Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"replicas", Config{Replicas: 7}, false},
		{"window beyond age", Config{MaxAge: time.Minute, DuplicateWindow: time.Hour}, false},
		{"ttl below window", Config{DuplicateWindow: time.Hour, RecordTTL: time.Minute}, false},
	}
	for _, tc := range tests {
		err := tc.c.WithDefaults().Validate()
		assert.False(t, (err == nil) != tc.ok, "%s: err %v", tc.name, err)
	}
}

func open(t *testing.T) *Store {
	t.Helper()
	ns, err := server.NewServer(&server.Options{JetStream: true, StoreDir: t.TempDir(), Port: -1, NoLog: true, NoSigs: true})
	require.NoError(t, err)
	go ns.Start()
	require.True(t, ns.ReadyForConnections(5*time.Second), "nats not ready")
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	st, err := Open(context.Background(), js, Config{DuplicateWindow: time.Second, RecordTTL: time.Hour})
	require.NoError(t, err)
	return st
}

func TestOpenCreatesStreamAndBuckets(t *testing.T) {
	st := open(t)
	info, err := st.Stream.Info(context.Background())
	require.NoError(t, err)
	require.False(t, info.Config.Storage != jetstream.FileStorage || info.Config.Duplicates != time.Second || len(info.Config.Subjects) != 4, "stream config %+v", info.Config)
	// Re-opening (another replica, a restart) is fine.
	_, err = Open(context.Background(), st.JS, st.Config)
	require.NoError(t, err)
}

// TestCreateFirstWriterWins: of many concurrent creators of one ID exactly
// one wins; CAS updates from many writers all land.
func TestCreateFirstWriterWins(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.Create(ctx, messages.Record{Namespace: "ns", InvocationID: "x", State: messages.StateQueued})
			if err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			} else if !errors.Is(err, ErrExists) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, 1, wins, "%d creators won", wins)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := st.Update(ctx, Key("ns", "x"), func(r *messages.Record) bool { r.Attempt++; return true }); err != nil {
				t.Error(err, i)
			}
		}()
	}
	wg.Wait()
	r, _, err := st.Get(ctx, Key("ns", "x"))
	require.False(t, err != nil || r.Attempt != 8, "attempt %d after 8 CAS increments (%v)", r.Attempt, err)
	_, _, err = st.Get(ctx, Key("ns", "missing"))
	require.ErrorIs(t, err, ErrNotFound)
}

// TestTransitionCached: a writer that keeps the Record it wrote updates it
// without reading; a stale copy (someone else wrote in between) costs a
// read and loses nothing.
func TestTransitionCached(t *testing.T) {
	tests := []struct {
		name string
		// meddle writes between the cached writer's writes (nil: nobody).
		meddle    func(t *testing.T, st *Store)
		wantState messages.State
		wantError string
		wantOK    bool
	}{
		{"nobody else writes", nil, messages.StateRunning, "", true},
		{"another writer in between", func(t *testing.T, st *Store) {
			_, _, err := st.Update(context.Background(), Key("ns", "c"), func(r *messages.Record) bool { r.Error = "note"; return true })
			require.NoError(t, err)
		}, messages.StateRunning, "note", true},
		{"cancelled in between", func(t *testing.T, st *Store) {
			_, _, err := st.Transition(context.Background(), Key("ns", "c"), messages.StateCancelled, "", 0, nil)
			require.NoError(t, err)
		}, messages.StateCancelled, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := open(t)
			ctx := context.Background()
			r := messages.Record{Namespace: "ns", InvocationID: "c", Pool: "p", State: messages.StateQueued}
			rev, err := st.Create(ctx, r)
			require.NoError(t, err)
			c := Cached{Record: r, Rev: rev}
			ok, err := st.TransitionCached(ctx, Key("ns", "c"), &c, messages.StateDispatched, "w", 1, nil)
			require.NoError(t, err)
			require.True(t, ok, "dispatch from the created revision")
			if tc.meddle != nil {
				tc.meddle(t, st)
			}
			ok, err = st.TransitionCached(ctx, Key("ns", "c"), &c, messages.StateRunning, "w", 1, nil)
			require.NoError(t, err)
			require.Equal(t, tc.wantOK, ok, "running")
			got, gotRev, err := st.Get(ctx, Key("ns", "c"))
			require.NoError(t, err)
			require.False(t, got.State != tc.wantState || got.Error != tc.wantError || got.Worker != "w" || got.Attempt != 1, "stored %+v, want state %s error %q worker w attempt 1", got, tc.wantState, tc.wantError)
			require.False(t, c.Rev != gotRev || c.Record.State != got.State, "cache at rev %d (%s), store at %d (%s)", c.Rev, c.Record.State, gotRev, got.State)
		})
	}
}
