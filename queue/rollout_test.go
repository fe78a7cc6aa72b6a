package queue_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/sidecar/sidecartest"
)

// executions counts every run of every invocation, as the framework sees it.
type executions struct {
	mu   sync.Mutex
	runs map[string]int
}

func (x *executions) handler(ctx context.Context, req framework.Request) (framework.Response, error) {
	x.mu.Lock()
	x.runs[req.InvocationID]++
	x.mu.Unlock()
	select {
	case <-time.After(time.Duration(50+rand.IntN(250)) * time.Millisecond):
	case <-ctx.Done():
		return framework.Response{}, ctx.Err()
	}
	return framework.Response{StatusCode: 200, Body: req.Payload}, nil
}

// rolloutWorker is a real sidecar in front of x.handler, as one worker Pod
// of a Deployment with a 20s drain.
func (e *env) rolloutWorker(name string, x *executions) *sidecartest.Worker {
	e.t.Helper()
	return sidecartest.Run(e.t, e.workerConfig(sidecartest.Config{Pool: testPool, Name: name, Concurrency: 2,
		ShutdownGrace: 20 * time.Second, Handler: x.handler}))
}

// TestRolloutRestartLosesNothing: a pool under steady load has its workers
// replaced one by one — a new worker starts, then an old one is told to
// stop as a rollout restart does — and every accepted invocation succeeds,
// each run exactly once by the framework: the draining sidecars finish
// what they run and hand back what they had not started.
func TestRolloutRestartLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("a rollout under load")
	}
	e := newEnv(t, func(c *queue.Config) { c.HeartbeatTimeout.Duration = 3 * time.Second })
	x := &executions{runs: map[string]int{}}
	const n = 3
	workers := make([]*sidecartest.Worker, 0, 2*n)
	for i := range n {
		workers = append(workers, e.rolloutWorker(fmt.Sprintf("old-%d", i), x))
	}
	require.Eventually(t, func() bool { return len(e.poolStatus().Workers) == n }, 10*time.Second, 20*time.Millisecond)

	// Load: 40 invocations/s, async, until the rollout is over.
	var ids []string
	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		t := time.NewTicker(25 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-stopLoad:
				return
			case <-t.C:
			}
			id := fmt.Sprintf("r-%d", i)
			r := e.invoke(map[string]any{"mode": "async", "invocationID": id, "payload": map[string]any{"i": i}})
			if r.code == 202 {
				ids = append(ids, id)
			}
		}
	}()

	time.Sleep(time.Second) // load before the first replacement (not an assertion)
	for i := range n {
		workers = append(workers, e.rolloutWorker(fmt.Sprintf("new-%d", i), x))
		want := n + 1
		require.Eventually(t, func() bool { return len(e.poolStatus().Workers) == want }, 10*time.Second, 20*time.Millisecond, "new-%d registered", i)
		require.NoError(t, workers[i].Stop()) // SIGTERM old-i and wait for its drain
	}
	time.Sleep(500 * time.Millisecond)
	close(stopLoad)
	<-loadDone
	require.NotEmpty(t, ids)

	handedBack := 0
	for _, id := range ids {
		rec := e.waitState(id, messages.StateSucceeded, 30*time.Second)
		for _, o := range rec.Attempts {
			if o.State == messages.AttemptHandedBack {
				handedBack++
			}
		}
	}
	e.quiet()
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, id := range ids {
		assert.Equal(t, 1, x.runs[id], "executions of %s", id)
	}
	t.Logf("%d invocations accepted and succeeded during the rollout, each run once; %d attempts handed back by draining workers", len(ids), handedBack)
}
