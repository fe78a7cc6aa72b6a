package queue_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/pool"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// BenchmarkSyncRoundTrip measures a sync invocation end to end: HTTP
// ingress → JetStream → activator → dispatch → worker (the real sidecar, in-process) → result →
// reply, next to a bare NATS request/reply ("baseline") in the same run.
// Sub-benchmarks rate=N issue requests open-loop at N/s and report p50 and
// p99; rate=max runs closed-loop with 32 concurrent callers for throughput.
// -short runs only rate=100 and rate=max. Each runs on a NATS with and
// without TLS (nats=tls, nats=plain). fsync compares the fsync before every
// acknowledgement (sync_interval always, the chart's default: "always")
// with JetStream's default sync every 2 minutes ("baseline"), both TLS, in
// the same run.
func BenchmarkSyncRoundTrip(b *testing.B) {
	// nats=tls: every connection (queue, workers, the baseline's) verified
	// TLS first, as runplane's NATS is run; nats=plain: without TLS.
	for _, useTLS := range []bool{false, true} {
		b.Run(map[bool]string{false: "nats=plain", true: "nats=tls"}[useTLS], func(b *testing.B) { syncRoundTrip(b, useTLS) })
	}
	b.Run("fsync", syncRoundTripFsync)
}

// roundTrip is one queue under a sync-invocation load: the env and its
// calls.
type roundTrip struct {
	e      *env
	client *http.Client
}

func newRoundTrip(b *testing.B, no natsOptions) *roundTrip {
	e := newEnvNATS(b, no, func(c *queue.Config) {
		c.Limits = pool.Limits{PoolMaxBacklog: -1, NamespaceMaxBacklog: -1, NamespaceMaxInFlight: -1}
	})
	for i := range 2 {
		e.worker(fmt.Sprintf("w%d", i), 64, nil)
	}
	return &roundTrip{e: e, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}}
}

var syncBody = []byte(`{"mode":"sync","payload":{"prompt":"robot"}}`)

// invoke is one sync invocation through the queue.
func (rt *roundTrip) invoke() error {
	r, err := rt.client.Post(rt.e.base+"/v1/namespaces/default/pools/"+testPool+"/invocations", "application/json", bytes.NewReader(syncBody))
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	if r.StatusCode != 200 {
		return fmt.Errorf("status %d", r.StatusCode)
	}
	return nil
}

// cpuTime is the process's CPU time (NATS server, queue, workers and client
// are all in it: a figure the other tenants of a shared machine disturb
// less than req/s).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU runs b's calls and reports the process's CPU time per call.
func reportCPU(b *testing.B, run func()) {
	c0 := cpuTime()
	run()
	b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// measure runs the queue's calls and reports the CPU time per call, the
// Record writes per invocation, and what the NATS server handled per call:
// messages in (every publish, ack, pull and API request of every client)
// and JetStream API requests (stream and consumer operations, message
// deletes, pulls; not publishes or acks) — the profile's unit of cost
// (queue/README.md, "Where a call's CPU goes").
func (rt *roundTrip) measure(b *testing.B, run func()) {
	bucket := "KV_" + rt.e.cfg.Stream.WithDefaults().RecordsBucket
	type counts struct{ kv, in, api uint64 }
	last := func() counts {
		time.Sleep(200 * time.Millisecond) // final writes land after the reply
		st, err := rt.e.js.Stream(context.Background(), bucket)
		require.NoError(b, err)
		v, err := rt.e.ns.Varz(nil)
		require.NoError(b, err)
		var api uint64
		if v.JetStream.Stats != nil {
			api = v.JetStream.Stats.API.Total
		}
		return counts{kv: st.CachedInfo().State.LastSeq, in: uint64(v.InMsgs), api: api}
	}
	before := last()
	reportCPU(b, run)
	after := last()
	b.ReportMetric(float64(after.kv-before.kv)/float64(b.N), "kv-writes/op")
	b.ReportMetric(float64(after.in-before.in)/float64(b.N), "nats-msgs/op")
	b.ReportMetric(float64(after.api-before.api)/float64(b.N), "js-api/op")
}

func syncRoundTrip(b *testing.B, useTLS bool) {
	rt := newRoundTrip(b, natsOptions{tls: useTLS})
	// Baseline responder: a bare NATS service.
	sub, err := rt.e.nc.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	require.NoError(b, err)
	defer func() { assert.NoError(b, sub.Unsubscribe()) }()
	// Each call kind is made in its sub-benchmark (a floor's stream or
	// bucket goes with it: the queue runs on a server without them).
	calls := map[string]func(*testing.B) func() error{
		"baseline": func(*testing.B) func() error {
			return func() error {
				_, err := rt.e.nc.Request("bench.echo", syncBody, 5*time.Second)
				return err
			}
		},
		"queue":     func(*testing.B) func() error { return rt.invoke },
		"jetstream": func(b *testing.B) func() error { return newJetStreamFloor(b, rt.e.js) },
		"http":      httpFloor,
		"record":    func(b *testing.B) func() error { return recordFloor(b, rt.e.js) },
	}
	measure := func(b *testing.B, name string, run func()) {
		if name == "queue" {
			rt.measure(b, run)
			return
		}
		reportCPU(b, run)
	}
	rates := []int{100, 500, 1000}
	if testing.Short() {
		rates = []int{100}
	}
	// Beside the baseline, the floors (floor_bench_test.go): what a
	// durable design of this shape pays, so what bounds the queue's figures.
	names := []string{"baseline", "jetstream", "record", "http", "queue"}
	for _, rate := range rates {
		for _, name := range names {
			b.Run(fmt.Sprintf("rate=%d/%s", rate, name), func(b *testing.B) {
				call := calls[name](b)
				measure(b, name, func() { openLoop(b, rate, call) })
			})
		}
	}
	for _, name := range names {
		b.Run("rate=max/"+name, func(b *testing.B) {
			call := calls[name](b)
			measure(b, name, func() { closedLoop(b, 32, call) })
		})
	}
}

// syncRoundTripFsync: the queue's round trip at 100/s and at its max rate
// on two NATS servers (file store, TLS) side by side, one fsyncing before
// every acknowledgement ("always") and one on JetStream's default
// ("baseline").
func syncRoundTripFsync(b *testing.B) {
	rts := map[string]*roundTrip{
		"baseline": newRoundTrip(b, natsOptions{tls: true}),
		"always":   newRoundTrip(b, natsOptions{tls: true, syncAlways: true}),
	}
	require.False(b, rts["baseline"].e.ns.JetStreamConfig().SyncAlways)
	require.True(b, rts["always"].e.ns.JetStreamConfig().SyncAlways)
	run := func(b *testing.B, rate string, call func() error) {
		if rate == "max" {
			closedLoop(b, 32, call)
			return
		}
		openLoop(b, 100, call)
	}
	for _, rate := range []string{"100", "max"} {
		for _, name := range []string{"baseline", "always"} {
			b.Run("rate="+rate+"/"+name, func(b *testing.B) {
				rts[name].measure(b, func() { run(b, rate, rts[name].invoke) })
			})
		}
	}
	// The JetStream floor with a fsync before every acknowledgement (the
	// least a durable call waits for on this disk), apart: it has no
	// baseline of its own.
	always := rts["always"]
	for _, rate := range []string{"100", "max"} {
		b.Run("floor/rate="+rate+"/jetstream", func(b *testing.B) {
			call := newJetStreamFloor(b, always.e.js)
			reportCPU(b, func() { run(b, rate, call) })
		})
	}
}

func report(b *testing.B, lat []time.Duration, elapsed time.Duration) {
	slices.Sort(lat)
	if len(lat) == 0 {
		return
	}
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
}

// openLoop issues b.N calls at a fixed rate regardless of completions.
func openLoop(b *testing.B, rate int, call func() error) {
	interval := time.Second / time.Duration(rate)
	lat := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	var errs sync.Map
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			if err := call(); err != nil {
				errs.Store(i, err)
			}
			lat[i] = time.Since(t0)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	errs.Range(func(_, v any) bool { b.Fatal(v); return false })
	report(b, lat, elapsed)
}

// closedLoop runs b.N calls from n concurrent callers.
func closedLoop(b *testing.B, n int, call func() error) {
	lat := make([]time.Duration, b.N)
	next := make(chan int, b.N)
	for i := range b.N {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t0 := time.Now()
				if err := call(); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	report(b, lat, elapsed)
}

// recordingScaler notes when each pool is first scaled.
type recordingScaler struct {
	mu   sync.Mutex
	seen map[string]chan struct{}
}

func (r *recordingScaler) ch(p string) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[p] == nil {
		r.seen[p] = make(chan struct{})
	}
	return r.seen[p]
}

func (r *recordingScaler) Scale(_ context.Context, p pool.Pool, from, to int) error {
	if from == 0 && to > 0 {
		ch := r.ch(p.Name)
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
	return nil
}

func (r *recordingScaler) MarkIdle(context.Context, string, []string) error { return nil }

// BenchmarkScaleFromZeroDecision measures from POSTing the first invocation
// of an empty pool to the activator's scale-up call.
func BenchmarkScaleFromZeroDecision(b *testing.B) {
	sc := &recordingScaler{seen: map[string]chan struct{}{}}
	pools := make([]string, b.N)
	for i := range pools {
		pools[i] = fmt.Sprintf("cold%d", i)
	}
	e := newEnv(b, func(c *queue.Config) { c.StaticPools = pools; c.Scaler = sc; c.Tick = 250 * time.Millisecond })
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	start := time.Now()
	for i, p := range pools {
		t0 := time.Now()
		r := e.do("POST", "/v1/namespaces/default/pools/"+p+"/invocations", map[string]any{"mode": "async"})
		require.EqualValues(b, 202, r.code, "%d %s", r.code, r.raw)
		select {
		case <-sc.ch(p):
		case <-time.After(10 * time.Second):
			b.Fatal("no scale decision")
		}
		lat[i] = time.Since(t0)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	report(b, lat, elapsed)
}
