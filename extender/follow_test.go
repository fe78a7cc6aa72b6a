package extender

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func TestFollowerHeld(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	lease := func(holder string, renewed time.Duration) *coordinationv1.Lease {
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder),
			LeaseDurationSeconds: ptr.To[int32](10), RenewTime: &metav1.MicroTime{Time: now.Add(-renewed)}}}
	}
	tests := []struct {
		name  string
		lease *coordinationv1.Lease
		want  time.Duration
	}{
		{"held by this host", lease("host-a_1234", 3*time.Second), 7 * time.Second},
		{"expired", lease("host-a_1234", 11*time.Second), 0},
		{"another host", lease("host-b_1234", 0), 0},
		{"a host whose name extends this one's", lease("host-ab_1234", 0), 0},
		{"no holder", &coordinationv1.Lease{}, 0},
		{"no Lease", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := follower{host: "host-a", clock: clocktesting.NewFakeClock(now)}
			require.Equal(t, tt.want, f.held(tt.lease))
		})
	}
}

// The follower binds while the Lease is held, stops when another host takes
// it, and stops at expiry when nobody renews it (no event comes then).
func TestFollowerRun(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	var current *coordinationv1.Lease
	setLease := func(holder string) {
		mu.Lock()
		defer mu.Unlock()
		current = &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder),
			LeaseDurationSeconds: ptr.To[int32](10), RenewTime: &metav1.MicroTime{Time: clk.Now()}}}
	}
	var binding atomic.Bool
	f := follower{host: "host-a", clock: clk, set: binding.Store, get: func(context.Context) (*coordinationv1.Lease, error) {
		mu.Lock()
		defer mu.Unlock()
		if current == nil {
			return nil, apierrors.NewNotFound(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "s")
		}
		return current.DeepCopy(), nil
	}}
	changed := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); f.run(ctx, changed) }()

	changed <- struct{}{} // the follower judged the missing Lease and waits again
	require.False(t, binding.Load())
	setLease("host-a_1")
	changed <- struct{}{}
	require.Eventually(t, clk.HasWaiters, 5*time.Second, time.Millisecond, "the expiry timer")
	require.True(t, binding.Load())

	clk.Step(9 * time.Second)
	// The fake clock fires due timers inside Step: a timer shorter than the
	// term would be gone now.
	require.True(t, clk.HasWaiters(), "the expiry timer still waits after 9 of 10 s")
	require.True(t, binding.Load(), "held until the term ends")
	clk.Step(time.Second)
	require.Eventually(t, func() bool { return !binding.Load() }, 5*time.Second, time.Millisecond, "unbound at expiry")

	setLease("host-a_1")
	changed <- struct{}{}
	require.Eventually(t, binding.Load, 5*time.Second, time.Millisecond)
	setLease("host-b_1")
	changed <- struct{}{}
	require.Eventually(t, func() bool { return !binding.Load() }, 5*time.Second, time.Millisecond, "another host leads")

	setLease("host-a_1")
	changed <- struct{}{}
	require.Eventually(t, binding.Load, 5*time.Second, time.Millisecond)
	cancel()
	<-done
	require.False(t, binding.Load(), "a stopped follower does not bind")
}
