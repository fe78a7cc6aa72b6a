package kubetest_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/shard"
)

// drainingRunnable stands in for the activator: a leader-election Runnable
// that takes drain to stop after its context ends.
type drainingRunnable struct {
	id            string
	drain         time.Duration
	active, maxed *atomic.Int32
	leaders       chan<- string
}

func (r drainingRunnable) Start(ctx context.Context) error {
	n := r.active.Add(1)
	for m := r.maxed.Load(); n > m && !r.maxed.CompareAndSwap(m, n); m = r.maxed.Load() {
	}
	r.leaders <- r.id
	<-ctx.Done()
	time.Sleep(r.drain) // an activator finishing in-flight work
	r.active.Add(-1)
	return nil
}

func (drainingRunnable) NeedLeaderElection() bool { return true }

// TestManagerHandsOverWithoutOverlap runs two queue managers contending
// for one Lease in this process. The leader is shut down while its
// activator takes a while to drain; the other may lead only after that
// activator returned (the Lease is released on cancel, after the
// Runnables stopped), so two activators never run at once.
func TestManagerHandsOverWithoutOverlap(t *testing.T) {
	// Longer than the manager's RetryPeriod (2s): a Lease released before
	// the drain ended would be taken while the first still runs.
	const drain = 2500 * time.Millisecond
	var active, maxed atomic.Int32
	leaders := make(chan string, 4)
	stops := map[string]context.CancelFunc{}
	done := make(chan error, 2)
	for _, id := range []string{"a", "b"} {
		mgr, err := queue.NewManager(queue.Config{RESTConfig: env.RESTConfig(),
			LeaderElection: shard.LeaderElection{LeaderElect: ptr.To(true), ResourceName: "overlap-test"}, LeaseNamespace: "default", Identity: id})
		require.NoError(t, err)
		require.NoError(t, mgr.Add(drainingRunnable{id: id, drain: drain, active: &active, maxed: &maxed, leaders: leaders}))
		ctx, cancel := context.WithCancel(context.Background())
		stops[id] = cancel
		go func() { done <- mgr.Start(ctx) }()
	}
	t.Cleanup(func() {
		for _, stop := range stops {
			stop()
		}
		for range stops {
			require.NoError(t, <-done)
		}
	})
	var first string
	select {
	case first = <-leaders:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "nobody led within 30s")
	}
	stops[first]()
	select {
	case second := <-leaders:
		require.NotEqual(t, first, second, "the stopped manager led again")
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the other contender did not take over within 30s")
	}
	require.EqualValues(t, 1, maxed.Load(), "activators ran at once")
}
