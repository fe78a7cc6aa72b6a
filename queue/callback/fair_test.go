package callback

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/natsauth"
)

// TestFairQueue: namespaces take turns, none runs more than its share at
// once, and a full namespace refuses (and asks for a rescan once it has
// room again) without touching another's.
func TestFairQueue(t *testing.T) {
	ctx := context.Background()
	q := newFairQueue(2, 4)
	for i := range 4 {
		added, _ := q.add(fmt.Sprintf("a.%d", i))
		require.True(t, added)
	}
	added, full := q.add("a.0")
	require.False(t, added || full, "already here")
	added, full = q.add("a.9")
	require.True(t, !added && full, "a is full")
	added, _ = q.add("b.0")
	require.True(t, added, "b is not")

	var got []string
	for range 3 {
		k, ok := q.next(ctx)
		require.True(t, ok)
		got = append(got, k)
	}
	assert.Equal(t, []string{"a.0", "b.0", "a.1"}, got, "in turn")
	_, ok := q.take()
	assert.False(t, ok, "a runs 2, its share; b has nothing ready")

	assert.False(t, q.done("b.0", false), "b never overflowed")
	assert.False(t, q.done("a.0", true), "a.0 waits for its retry: a still holds 4")
	k, ok := q.take()
	require.True(t, ok)
	assert.Equal(t, "a.2", k)
	assert.False(t, q.done("a.1", false), "3 pending, above half of 4")
	assert.True(t, q.done("a.2", false), "2 pending: room again, rescan")

	q.requeue("a.0") // its retry is due: behind a.3
	for _, want := range []string{"a.3", "a.0"} {
		k, ok = q.take()
		require.True(t, ok)
		assert.Equal(t, want, k)
		assert.False(t, q.done(k, false), "rescan asked once")
	}
	q.requeue("a.0") // gone: nothing
	_, ok = q.take()
	assert.False(t, ok)
	assert.Empty(t, q.spaces, "nothing held for idle namespaces")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, ok = q.next(cctx)
	assert.False(t, ok)
}

func startStore(t *testing.T) *stream.Store {
	t.Helper()
	js, err := jetstream.New(natsauth.Connect(t, natsauth.JetStream(t, nil).ClientURL()))
	require.NoError(t, err)
	st, err := stream.Open(context.Background(), js, stream.Config{})
	require.NoError(t, err)
	return st
}

// terminal writes a succeeded Record of ns/id with a callback to url.
func terminal(t *testing.T, st *stream.Store, ns, id, url string) {
	t.Helper()
	now := time.Now()
	_, err := st.Create(context.Background(), messages.Record{InvocationID: id, Namespace: ns, Pool: "echo", Mode: messages.ModeAsync,
		State: messages.StateSucceeded, AcceptedAt: now, UpdatedAt: now, Callback: &messages.CallbackStatus{URL: url, State: messages.CallbackPending}})
	require.NoError(t, err)
}

var testMaster = []byte("0123456789abcdef0123456789abcdef")

// runDeliverer runs a Deliverer that may reach the tests' receivers on
// loopback.
func runDeliverer(t *testing.T, cfg Config) *Deliverer {
	t.Helper()
	cfg.AllowCIDRs = []string{"127.0.0.0/8"}
	return startDeliverer(t, cfg)
}

// startDeliverer runs a Deliverer of cfg, with the tests' master key.
func startDeliverer(t *testing.T, cfg Config) *Deliverer {
	t.Helper()
	cfg.MasterKey = testMaster
	d, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return d
}

// TestDeliverHangingNamespaceHoldsItsShareOnly: namespace team-a has many
// callbacks whose target never answers until the test ends (each POST
// would hold a worker for the whole 10-minute timeout); team-b's callback
// is delivered meanwhile, whether it was queued behind all of team-a's or
// came once team-a's share of the workers was hanging (the one left is
// free: the cap, not the turn order, keeps it), and team-a never had more
// than its share.
func TestDeliverHangingNamespaceHoldsItsShareOnly(t *testing.T) {
	for _, tc := range []struct {
		name string
		late bool // team-b's Record written once team-a's share hangs
	}{{"queued behind", false}, {"arrives later", true}} {
		t.Run(tc.name, func(t *testing.T) {
			st := startStore(t)
			release := make(chan struct{})
			var mu sync.Mutex
			inFlight, maxInFlight := 0, 0
			arrived := make(chan struct{}, 16)
			hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				inFlight++
				maxInFlight = max(maxInFlight, inFlight)
				mu.Unlock()
				select {
				case arrived <- struct{}{}:
				default:
				}
				defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}))
			t.Cleanup(hang.Close)
			bGot := make(chan string, 1)
			b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case bGot <- r.Header.Get(DeliveryHeader):
				default:
				}
			}))
			t.Cleanup(b.Close)
			for i := range 16 {
				terminal(t, st, "team-a", fmt.Sprintf("slow-%d", i), hang.URL)
			}
			if !tc.late {
				terminal(t, st, "team-b", "fast", b.URL)
			}
			t.Cleanup(func() { close(release) }) // runs before the servers close

			runDeliverer(t, Config{Store: st, Delivery: Delivery{Workers: 3, NamespaceWorkers: 2}, Timeout: 10 * time.Minute})
			for range 2 { // team-a's share is hanging (and stays so: nothing releases it)
				select {
				case <-arrived:
				case <-time.After(time.Minute):
					require.FailNow(t, "team-a's POSTs did not start")
				}
			}
			if tc.late {
				terminal(t, st, "team-b", "fast", b.URL)
			}
			select {
			case d := <-bGot:
				assert.Equal(t, "team-b/fast/succeeded", d)
			case <-time.After(time.Minute):
				require.Fail(t, "team-b's callback waits behind team-a's hanging targets")
			}
			mu.Lock()
			defer mu.Unlock()
			assert.LessOrEqual(t, maxInFlight, 2, "team-a held at most its share of the workers")
		})
	}
}

// TestDeliverFullNamespaceLosesNothing: a namespace with more callbacks
// due than it may hold in memory gets every one delivered, once: those
// refused wait in their Records and are read back.
func TestDeliverFullNamespaceLosesNothing(t *testing.T) {
	st := startStore(t)
	var mu sync.Mutex
	got := map[string]int{}
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got[r.Header.Get(DeliveryHeader)]++
		mu.Unlock()
	}))
	t.Cleanup(rc.Close)
	const n = 9
	for i := range n {
		terminal(t, st, "team-a", fmt.Sprintf("i%d", i), rc.URL)
	}
	d := runDeliverer(t, Config{Store: st, Delivery: Delivery{Workers: 2, NamespaceWorkers: 1}, NamespaceMaxPending: 2})
	require.Eventually(t, func() bool {
		for i := range n {
			rec, _, err := st.Get(context.Background(), stream.Key("team-a", fmt.Sprintf("i%d", i)))
			if err != nil || rec.Callback.State != messages.CallbackDelivered {
				return false
			}
		}
		return true
	}, time.Minute, 20*time.Millisecond, "every callback delivered")
	assert.Positive(t, testutil.ToFloat64(d.m.deferred), "some waited in their Records")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, n)
	for d, c := range got {
		assert.Equal(t, 1, c, d)
	}
}
