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

	"github.com/runplane/runplane/queue/messages"
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
		if got := Advance(tc.cur, tc.curAttempt, tc.next, tc.attempt); got != tc.want {
			t.Errorf("Advance(%s@%d → %s@%d) = %v, want %v", tc.cur, tc.curAttempt, tc.next, tc.attempt, got, tc.want)
		}
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
		if err := tc.c.WithDefaults().Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: err %v", tc.name, err)
		}
	}
}

func open(t *testing.T) *Store {
	t.Helper()
	ns, err := server.NewServer(&server.Options{JetStream: true, StoreDir: t.TempDir(), Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats not ready")
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	st, err := Open(context.Background(), js, Config{DuplicateWindow: time.Second, RecordTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestOpenCreatesStreamAndBuckets(t *testing.T) {
	st := open(t)
	info, err := st.Stream.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Storage != jetstream.FileStorage || info.Config.Duplicates != time.Second || len(info.Config.Subjects) != 4 {
		t.Fatalf("stream config %+v", info.Config)
	}
	// Re-opening (another replica, a restart) is fine.
	if _, err := Open(context.Background(), st.JS, st.Config); err != nil {
		t.Fatal(err)
	}
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
			_, err := st.Create(ctx, messages.Record{InvocationID: "x", State: messages.StateQueued})
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
	if wins != 1 {
		t.Fatalf("%d creators won", wins)
	}
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := st.Update(ctx, "x", func(r *messages.Record) bool { r.Attempt++; return true }); err != nil {
				t.Error(err, i)
			}
		}()
	}
	wg.Wait()
	r, _, err := st.Get(ctx, "x")
	if err != nil || r.Attempt != 8 {
		t.Fatalf("attempt %d after 8 CAS increments (%v)", r.Attempt, err)
	}
	if _, _, err := st.Get(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
}
