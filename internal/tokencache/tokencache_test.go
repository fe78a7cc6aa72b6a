package tokencache

import (
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestCache(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	cases := []struct {
		name         string
		refuse       bool
		expires      time.Time
		after        time.Duration
		wantFound    bool
		wantAccepted bool
	}{
		{name: "accepted within the TTL", after: 59 * time.Second, wantFound: true, wantAccepted: true},
		{name: "accepted forgotten after the TTL", after: 61 * time.Second},
		{name: "accepted forgotten at the token's expiry", expires: start.Add(10 * time.Second), after: 11 * time.Second},
		{name: "accepted kept before the token's expiry", expires: start.Add(10 * time.Second), after: 9 * time.Second, wantFound: true, wantAccepted: true},
		{name: "expired token never kept", expires: start.Add(-time.Second)},
		{name: "refused within its TTL", refuse: true, after: 4 * time.Second, wantFound: true},
		{name: "refused forgotten after its TTL", refuse: true, after: 6 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(start)
			c := New[string](8, clk)
			if tc.refuse {
				c.Refuse("tok", "no", 5*time.Second)
			} else {
				c.Accept("tok", "yes", time.Minute, tc.expires)
			}
			clk.Step(tc.after)
			v, accepted, found := c.Get("tok")
			assert.Equal(t, tc.wantFound, found)
			assert.Equal(t, tc.wantAccepted, accepted)
			if found {
				assert.Equal(t, map[bool]string{true: "yes", false: "no"}[accepted], v)
			}
			_, _, other := c.Get("other")
			assert.False(t, other)
		})
	}
}

// TestRefusalsNeverEvictAcceptances: a flood of refused tokens fills only
// the refused side.
func TestRefusalsNeverEvictAcceptances(t *testing.T) {
	c := New[int](8, clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0)))
	c.Accept("good", 1, time.Minute, time.Time{})
	for i := range 1000 {
		c.Refuse(fmt.Sprint("forged-", i), 0, time.Minute)
	}
	v, accepted, found := c.Get("good")
	assert.True(t, found && accepted)
	assert.Equal(t, 1, v)
	assert.Equal(t, []any{sha256.Sum256([]byte("good"))}, c.accepted.Keys(), "keys are SHA-256 digests, never the token")
	assert.Len(t, c.refused.Keys(), 8, "bounded")
}
