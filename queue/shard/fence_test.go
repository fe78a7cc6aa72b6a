package shard

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
)

// fence fires RenewDeadline after the start of the older of the last
// Lease write and the last members write, and not before; it gives up
// (false) when the run ends first.
func TestFence(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name             string
		lease, members   time.Duration // after t0
		renewLeaseAt     time.Duration // a renewal written meanwhile (0: none)
		firesAt, stopsAt time.Duration // stopsAt: the run ends (0: never)
	}{
		{name: "the Lease's write is the older", lease: 0, members: time.Second, firesAt: 3 * time.Second},
		{name: "the members write is the older", lease: time.Second, members: 0, firesAt: 3 * time.Second},
		{name: "a renewal pushes it back, the members write then bounds it", lease: 0, members: time.Second, renewLeaseAt: 2 * time.Second, firesAt: 4 * time.Second},
		{name: "the run ends first", lease: 0, members: 0, firesAt: 3 * time.Second, stopsAt: 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			cfg := Config{RenewDeadline: 3 * time.Second, Clock: clk}
			sl := &slot{}
			var members stamp
			sl.renewed.set(t0.Add(tc.lease))
			members.set(t0.Add(tc.members))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			fired := make(chan bool, 1)
			go func() { fired <- fence(ctx, cfg, &sl.renewed, &members) }()
			for at := 100 * time.Millisecond; ; at += 100 * time.Millisecond {
				// The barrier: the fence waits on its timer again, or has fired.
				require.Eventually(t, func() bool { return clk.HasWaiters() || len(fired) > 0 }, 5*time.Second, time.Millisecond)
				require.Empty(t, fired, "fired early, at +%s", at-100*time.Millisecond)
				clk.SetTime(t0.Add(at))
				if at == tc.renewLeaseAt {
					sl.renewed.set(t0.Add(at))
				}
				if tc.stopsAt != 0 && at == tc.stopsAt {
					cancel()
					assert.False(t, <-fired, "the run ended: no fence")
					return
				}
				if at >= tc.firesAt {
					break
				}
			}
			require.Eventually(t, func() bool { return len(fired) > 0 }, 5*time.Second, time.Millisecond, "fires at +%s", tc.firesAt)
			assert.True(t, <-fired)
		})
	}
}
