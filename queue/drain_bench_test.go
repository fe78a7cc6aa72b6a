package queue_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/pool"
)

// drainPools is how many pools BenchmarkBacklogDrain spreads its backlog
// over (issue 33: 100,000 queued in 10 pools).
const drainPools = 10

// BenchmarkBacklogDrain measures how fast a deep backlog drains: b.N async
// invocations (1 KiB payloads) queued over 10 pools with no worker, then
// one stub worker per pool (the real sidecar in front of an echo, 64 at
// once) started and timed until every pool's backlog and in-flight are 0.
// "baseline": the bare JetStream floor of the same work in the same run —
// b.N messages of the same size in a stream over 10 subjects, drained by 10
// pull consumers that ack each. It reports drained/s and the process's CPU
// per invocation during the drain (NATS, queue and workers all in it).
func BenchmarkBacklogDrain(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 1000)
	b.Run("baseline", func(b *testing.B) { drainBaseline(b, payload) })
	b.Run("queue", func(b *testing.B) { drainQueue(b, payload) })
}

func drainQueue(b *testing.B, payload []byte) {
	pools := make([]string, drainPools)
	for i := range pools {
		pools[i] = fmt.Sprintf("drain%d", i)
	}
	e := newEnv(b, func(c *queue.Config) {
		c.StaticPools = pools
		c.Limits = pool.Limits{PoolMaxBacklog: -1, NamespaceMaxBacklog: -1, NamespaceMaxInFlight: -1, NamespaceMaxStreamBytes: -1, NamespaceMaxRecordBytes: -1}
	})
	body := mustJSON(b, map[string]any{"mode": "async", "payload": map[string]string{"data": string(payload)}})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: time.Minute}
	// Fill with 16 concurrent callers, round robin over the pools.
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
				r, err := client.Post(e.base+"/v1/namespaces/default/pools/"+pools[i%drainPools]+"/invocations", "application/json", bytes.NewReader(body))
				if !assert.NoError(b, err) {
					return
				}
				// Read to its end, or the connection is not reused: a dial
				// per call was 6% of a profile's samples.
				_, _ = io.Copy(io.Discard, r.Body)
				_ = r.Body.Close()
				if !assert.Equal(b, http.StatusAccepted, r.StatusCode) {
					return
				}
			}
		})
	}
	wg.Wait()
	require.False(b, b.Failed())
	backlog := func() (queued, inFlight int) {
		for _, p := range pools {
			st := e.poolStatusOf("default", p)
			queued, inFlight = queued+st.Backlog, inFlight+st.InFlight
		}
		return queued, inFlight
	}
	require.Eventually(b, func() bool { q, _ := backlog(); return q == b.N }, 5*time.Minute, 100*time.Millisecond, "all queued in the activator")

	b.ResetTimer()
	c0, start := cpuTime(), time.Now()
	for _, p := range pools {
		e.tenantWorker("default", p, "w-"+p, 64, nil)
	}
	require.Eventually(b, func() bool { q, f := backlog(); return q+f == 0 }, time.Hour, 20*time.Millisecond, "drained")
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "drained/s")
	b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// drainBaseline: the JetStream floor of a drain, b.N stored messages over
// drainPools subjects, each pulled and acked by its subject's consumer.
func drainBaseline(b *testing.B, payload []byte) {
	e := newEnv(b, nil)
	ctx := context.Background()
	st, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "DRAIN", Subjects: []string{"drain.>"}})
	require.NoError(b, err)
	for i := range b.N {
		_, err := e.js.PublishAsync(fmt.Sprintf("drain.%d", i%drainPools), payload)
		require.NoError(b, err)
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		b.Fatal("publish")
	}
	b.ResetTimer()
	c0, start := cpuTime(), time.Now()
	var wg sync.WaitGroup
	for p := range drainPools {
		c, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{FilterSubject: fmt.Sprintf("drain.%d", p), AckPolicy: jetstream.AckExplicitPolicy})
		require.NoError(b, err)
		want := b.N / drainPools
		if p < b.N%drainPools {
			want++
		}
		wg.Go(func() {
			for got := 0; got < want; {
				batch, err := c.Fetch(min(64, want-got), jetstream.FetchMaxWait(5*time.Second))
				if !assert.NoError(b, err) {
					return
				}
				for m := range batch.Messages() {
					if !assert.NoError(b, m.Ack()) {
						return
					}
					got++
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "drained/s")
	b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N), "cpu-µs/op")
}
