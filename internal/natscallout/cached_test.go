package natscallout

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	clocktesting "k8s.io/utils/clock/testing"
)

// counting is an Authenticator answering from a table and counting calls.
type counting struct {
	ids   map[string]Identity
	errs  map[string]error
	calls int
}

func (c *counting) Authenticate(_ context.Context, token string) (Identity, error) {
	c.calls++
	if err, ok := c.errs[token]; ok {
		return Identity{}, err
	}
	return c.ids[token], nil
}

func TestCached(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	cases := []struct {
		name      string
		id        Identity
		err       error
		after     time.Duration
		wantCalls int // after the second Authenticate
	}{
		{name: "admission reused within the TTL", id: Identity{Name: "a", Expires: start.Add(time.Hour)}, after: 59 * time.Second, wantCalls: 1},
		{name: "admission asked again after the TTL", id: Identity{Name: "a", Expires: start.Add(time.Hour)}, after: 61 * time.Second, wantCalls: 2},
		{name: "admission never reused past the identity's expiry", id: Identity{Name: "a", Expires: start.Add(10 * time.Second)}, after: 11 * time.Second, wantCalls: 2},
		{name: "apiserver refusal remembered briefly", err: refuse(ReasonInvalidToken, "no"), after: 4 * time.Second, wantCalls: 1},
		{name: "apiserver refusal asked again after RefusedTTL", err: refuse(ReasonNotWorker, "no"), after: 6 * time.Second, wantCalls: 2},
		{name: "outage not remembered", err: apiRefusal(errors.New("connection refused"), "reviewing"), wantCalls: 2},
		{name: "timeout not remembered", err: context.DeadlineExceeded, wantCalls: 2},
		{name: "malformed token not remembered", err: refuse(ReasonMalformed, "not a JWT"), wantCalls: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(start)
			auth := &counting{ids: map[string]Identity{"tok": tc.id}, errs: map[string]error{}}
			if tc.err != nil {
				auth.errs["tok"] = tc.err
			}
			c := NewCached(auth, CacheOptions{TTL: time.Minute, RefusedTTL: 5 * time.Second, Clock: clk})
			id1, err1 := c.Authenticate(context.Background(), "tok")
			assert.Equal(t, tc.err == nil || strings.Contains(tc.name, "apiserver refusal"), c.Known("tok"), "known right after")
			clk.Step(tc.after)
			id2, err2 := c.Authenticate(context.Background(), "tok")
			assert.Equal(t, tc.wantCalls, auth.calls)
			assert.Equal(t, id1, id2)
			assert.Equal(t, err1, err2)
		})
	}
}
