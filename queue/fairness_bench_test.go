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

	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/sidecar/sidecartest"
	"github.com/stretchr/testify/require"
)

// BenchmarkTenantFlood measures tenant B's sync round trip (open loop,
// 100/s, p50/p99) unloaded ("baseline") and while tenant A floods the same
// queue service ("flood"), in one run: A's callers post async invocations
// at 1000/s, keeping A at its namespace backlog limit (most of A's requests
// get 429) and its in-flight limit (A's workers take 100ms per invocation,
// like a short GPU job). The goal is B's p99 within 2× of its unloaded
// figure. flood-req/s and flood-429-% say how hard A pushed.
func BenchmarkTenantFlood(b *testing.B) {
	// floodRate: tenant A's requests per second, 10× tenant B's. The load
	// generator runs in the same process on the same cores: a closed-loop
	// flood measures mostly the flooders' own HTTP client CPU.
	const floodRate = 1000
	e := newEnv(b, func(c *queue.Config) {
		c.StaticPools = []string{"team-a/p", "team-b/p"}
		c.Limits = pool.Limits{PoolMaxBacklog: 200, NamespaceMaxBacklog: 200, NamespaceMaxInFlight: 16}
	})
	for i := range 2 {
		e.tenantWorker("team-a", "p", fmt.Sprint("w", i), 16, sidecartest.Sleep(100*time.Millisecond))
		e.tenantWorker("team-b", "p", fmt.Sprint("w", i), 16, nil)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	post := func(ns, mode string) (int, error) {
		r, err := client.Post(e.base+invocations(ns, "p"), "application/json", bytes.NewBufferString(`{"mode":"`+mode+`","payload":{"prompt":"robot"}}`))
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
		return r.StatusCode, nil
	}
	callB := func() error {
		code, err := post("team-b", "sync")
		if err == nil && code != 200 {
			err = fmt.Errorf("tenant B: status %d", code)
		}
		return err
	}
	b.Run("baseline", func(b *testing.B) { openLoop(b, 100, callB) })
	b.Run("flood", func(b *testing.B) {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var sent, limited atomic.Int64
		// A's callers: floodRate requests/s in all, each its own connection.
		const callers = 8
		for range callers {
			wg.Go(func() {
				tick := time.NewTicker(callers * time.Second / floodRate)
				defer tick.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					code, err := post("team-a", "async")
					if err != nil {
						continue
					}
					sent.Add(1)
					if code == http.StatusTooManyRequests {
						limited.Add(1)
					}
				}
			})
		}
		// A is at its backlog limit before B is measured.
		require.Eventually(b, func() bool { return limited.Load() > 0 }, 30*time.Second, 10*time.Millisecond,
			"tenant A's flood never reached its backlog limit")
		start, sent0, limited0 := time.Now(), sent.Load(), limited.Load()
		openLoop(b, 100, callB)
		elapsed, n, l := time.Since(start), sent.Load()-sent0, limited.Load()-limited0
		cancel()
		wg.Wait()
		b.ReportMetric(float64(n)/elapsed.Seconds(), "flood-req/s")
		if n > 0 {
			b.ReportMetric(100*float64(l)/float64(n), "flood-429-%")
		}
	})
}
