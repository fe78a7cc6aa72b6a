package shard

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestGuardRunsAgainAfterFence: an API stall longer than the renew
// deadline fences the running activator (stopped at once), and once the
// members Lease can be written again the Guard runs it again — it does not
// return (which restarted the whole queue on every such stall).
func TestGuardRunsAgainAfterFence(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	client := fake.NewClientset()
	var failing atomic.Bool
	client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, errors.New("API server unavailable")
		}
		return false, nil, nil
	})
	started, stopped := make(chan struct{}, 4), make(chan struct{}, 4)
	g, err := NewGuard(Config{
		Leases: client.CoordinationV1(), Namespace: "runplane", Identity: "a",
		Clock: clk,
		Run: func(ctx context.Context, _ int) error {
			started <- struct{}{}
			<-ctx.Done()
			stopped <- struct{}{}
			return nil
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan error, 1)
	go func() { exited <- g.Start(ctx) }()
	defer func() {
		cancel()
		assert.NoError(t, <-exited)
	}()

	// step advances the fake clock until ch receives (the Guard's ticker
	// and the fence's timer run on it), or fails once the Guard returned.
	step := func(ch <-chan struct{}, what string) {
		t.Helper()
		for range 2000 {
			select {
			case <-ch:
				return
			case err := <-exited:
				exited <- err // for the deferred check
				require.FailNow(t, "the Guard returned", "waiting until %s: %v", what, err)
			default:
			}
			clk.Step(50 * time.Millisecond)
			time.Sleep(time.Millisecond) // let the Guard's goroutines see the new time
		}
		require.FailNow(t, "timed out", "waiting until %s (100 s of fake time)", what)
	}
	step(started, "the activator runs")
	failing.Store(true)
	step(stopped, "the fence stops the activator")
	failing.Store(false)
	step(started, "the activator runs again")
}
