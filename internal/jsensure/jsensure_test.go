package jsensure

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/runplane/runplane/test/natsauth"
)

// TestCacheRemembersFailuresForAWhile: a resource that could not be made
// is not asked for again until RetryAfter has passed; one that was made is
// never asked for again.
func TestCacheRemembersFailuresForAWhile(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	c := Cache[string]{Clock: clk}
	calls := 0
	noRoom := errors.New("no room")
	create := func(ok bool) func() (string, error) {
		return func() (string, error) {
			calls++
			if !ok {
				return "", noRoom
			}
			return "stream", nil
		}
	}
	for range 3 {
		_, err := c.Get("ns-a", create(false))
		require.ErrorIs(t, err, noRoom)
	}
	require.Equal(t, 1, calls, "a failure is the answer until RetryAfter")
	clk.SetTime(clk.Now().Add(RetryAfter))
	v, err := c.Get("ns-a", create(true))
	require.NoError(t, err)
	require.Equal(t, "stream", v)
	require.Equal(t, 2, calls)
	v, err = c.Get("ns-a", create(false))
	require.NoError(t, err)
	require.Equal(t, "stream", v)
	require.Equal(t, 2, calls, "a success is remembered")
	_, err = c.Get("ns-b", create(false))
	require.ErrorIs(t, err, noRoom)
	require.Equal(t, 3, calls, "each name is its own")
}

func TestNoRoom(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("create: %w", &jetstream.APIError{ErrorCode: 10023}), true},
		{&jetstream.APIError{ErrorCode: 10047}, true},
		{&jetstream.APIError{ErrorCode: 10058}, false}, // stream name in use
		{&jetstream.APIError{ErrorCode: 10005, Description: "no suitable peers for placement, insufficient storage"}, true},
		{&jetstream.APIError{ErrorCode: 10005, Description: "no suitable peers for placement, peer offline"}, false},
		{errors.New("insufficient resources"), false},
		{nil, false},
	} {
		require.Equal(t, tt.want, NoRoom(tt.err), "%v", tt.err)
	}
}

// TestCacheTTL: a success is made sure of again once TTL has passed, and
// not before; without TTL it is remembered for good.
func TestCacheTTL(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	calls := 0
	create := func() (int, error) { calls++; return calls, nil }
	c := Cache[int]{Clock: clk, TTL: time.Minute}
	v, err := c.Get("a", create)
	require.NoError(t, err)
	require.Equal(t, 1, v)
	clk.SetTime(clk.Now().Add(59 * time.Second))
	v, _ = c.Get("a", create)
	require.Equal(t, 1, v, "within TTL")
	clk.SetTime(clk.Now().Add(time.Second))
	v, _ = c.Get("a", create)
	require.Equal(t, 2, v, "made sure of again after TTL")

	forever := Cache[int]{Clock: clk}
	v, _ = forever.Get("a", create)
	clk.SetTime(clk.Now().Add(24 * time.Hour))
	again, _ := forever.Get("a", create)
	require.Equal(t, v, again)
}

// TestNoRoomClustered: in a JetStream cluster (the chart's default NATS)
// a stream whose MaxBytes no server has room to reserve is refused by the
// meta leader's placement, "no suitable peers for placement, insufficient
// storage" (JSClusterNoPeersErrF), not with the single server's
// "insufficient storage resources": NoRoom must see both. A stream that
// cannot be placed for another reason (tags no server has) is not "no
// room".
func TestNoRoomClustered(t *testing.T) {
	a, servers := natsauth.ClusterWith(t, nil, 3, natsauth.Extra{JetStream: "max_file_store: 1MiB"})
	asQueue, err := a.QueueOption()
	require.NoError(t, err)
	nc := natsauth.Connect(t, natsauth.ClientURLs(servers), asQueue)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "FITS", Subjects: []string{"fits"}, Replicas: 3, MaxBytes: 512 << 10})
	require.NoError(t, err, "a stream within max_file_store")
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "TOOBIG", Subjects: []string{"toobig"}, Replicas: 3, MaxBytes: 4 << 20})
	require.Error(t, err)
	require.True(t, NoRoom(err), "no room in a cluster is not recognised: %v", err)

	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "NOWHERE", Subjects: []string{"nowhere"}, Replicas: 3, MaxBytes: 64 << 10,
		Placement: &jetstream.Placement{Tags: []string{"nowhere"}}})
	require.ErrorContains(t, err, "no suitable peers for placement")
	require.False(t, NoRoom(err), "a stream placed nowhere for its tags is not no room: %v", err)
}
