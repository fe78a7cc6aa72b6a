package chaos_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/queue/config"
	"github.com/runplane/runplane/test/chaos"
	"github.com/runplane/runplane/test/chaos/execlog"
)

// TestBacklog is issue 16 item 9: 100,000 queued invocations (1 KiB
// payloads) across 10 pools with no workers, then one worker per pool
// starts. It reports the queue's RSS idle, with the backlog queued and at
// its peak, and the time to drain; every invocation must run once.
func TestBacklog(t *testing.T) {
	fullOnly(t)
	const pools = 10
	total := 100_000
	ctx := context.Background()
	dir := chaos.CaseDir(t, "backlog")
	n, err := chaos.StartNATS(binaries(t), dir, chaos.NATSOptions{})
	require.NoError(t, err)
	t.Cleanup(n.Kill)
	var names []string
	for i := range pools {
		names = append(names, "chaos/b"+strconv.Itoa(i))
	}
	// 100,000 queued in one namespace hold ~470 MiB of its byte budgets
	// (ingress share.go): the case measures the backlog, not the budget.
	q, err := chaos.StartQueue(binaries(t), dir, "queue", n.URL, chaos.QueueOptions{Pools: names,
		Configure: []func(*config.QueueConfiguration){func(c *config.QueueConfiguration) {
			c.Limits.NamespaceMaxStreamBytes, c.Limits.NamespaceMaxRecordBytes = -1, -1
		}}})
	require.NoError(t, err)
	t.Cleanup(q.Kill)
	var peak int64
	var peakMu sync.Mutex
	sample := func() int64 {
		v, err := q.RSS()
		require.NoError(t, err)
		peakMu.Lock()
		peak = max(peak, v)
		peakMu.Unlock()
		return v
	}
	stopSampling := make(chan struct{})
	go func() {
		tk := time.NewTicker(250 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tk.C:
				if v, err := q.RSS(); err == nil {
					peakMu.Lock()
					peak = max(peak, v)
					peakMu.Unlock()
				}
			}
		}
	}()
	defer close(stopSampling)
	idle := sample()

	// Fill: every pool at once, as fast as the ingress takes them.
	start := time.Now()
	results := make([]chaos.LoadResult, pools)
	var wg sync.WaitGroup
	for i := range pools {
		wg.Go(func() {
			results[i] = chaos.Load{URLs: []string{q.URL}, Namespace: "chaos", Pool: "b" + strconv.Itoa(i), Rate: 5000, Total: total / pools,
				Block: true, MaxInFlight: 8, IDPrefix: fmt.Sprintf("b%d-", i), PayloadBytes: 1024}.Run(ctx)
		})
	}
	wg.Wait()
	fill := time.Since(start)
	var accepted []string
	for _, r := range results {
		accepted = append(accepted, r.Accepted...)
		t.Logf("fill: %s", r)
	}
	require.Len(t, accepted, total, "every invocation accepted")
	backlog := func() (queued, inFlight int) {
		for i := range pools {
			st, err := chaos.PoolStatus(ctx, q.URL, "chaos", "b"+strconv.Itoa(i))
			if err == nil {
				queued += st.Backlog
				inFlight += st.InFlight
			}
		}
		return queued, inFlight
	}
	require.Eventually(t, func() bool { b, _ := backlog(); return b == total }, 2*time.Minute, time.Second, "the activator took in the backlog")
	queued := sample()
	t.Logf("queue RSS idle %d MiB, %d queued %d MiB (%.0f bytes per queued invocation); fill %v (%.0f/s)",
		idle>>20, total, queued>>20, float64(queued-idle)/float64(total), fill.Round(time.Second), float64(total)/fill.Seconds())

	// Drain: one worker per pool, concurrency 8, no work time.
	execLog := filepath.Join(dir, "exec.log")
	start = time.Now()
	for i := range pools {
		w, err := chaos.StartWorker(binaries(t), dir, "w"+strconv.Itoa(i), n.URL, chaos.WorkerOptions{Namespace: "chaos", Pool: "b" + strconv.Itoa(i),
			Concurrency: 8, ExecLog: execLog})
		require.NoError(t, err)
		t.Cleanup(w.Kill)
	}
	require.Eventually(t, func() bool { b, f := backlog(); return b+f == 0 }, 20*time.Minute, time.Second, "drained")
	drain := time.Since(start)
	recs := chaos.Settle(ctx, q.URL, "chaos", accepted, 30*time.Second, 5*time.Minute)
	runs, err := execlog.Read(execLog)
	require.NoError(t, err)
	c := chaos.Count(accepted, recs, runs)
	t.Logf("backlog: %s", c)
	note := fmt.Sprintf("fill %v (%.0f/s); RSS idle %d MiB, %dk queued %d MiB, peak %d MiB; drain %v (%.0f/s)",
		fill.Round(time.Second), float64(total)/fill.Seconds(), idle>>20, total/1000, queued>>20, peak>>20,
		drain.Round(time.Second), float64(total)/drain.Seconds())
	report(t, chaos.NewRow("backlog 100k across 10 pools", float64(total)/fill.Seconds(), drain.Round(time.Second).String(), c, peak, note))
	assert.Zero(t, c.Lost, "%s", c)
	assert.Zero(t, c.RunTwice, "%s", c)
	assert.Equal(t, total, c.Succeeded, "%s", c)
}
