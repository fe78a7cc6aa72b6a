package objects

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/test/natsauth"
)

func TestNames(t *testing.T) {
	assert.Equal(t, "RS_OBJ_team-a", Bucket("RS", "team-a"))
	assert.Equal(t, "RS_OBJ_team-a_echo", PoolBucket("RS", "team-a", "echo"))
	assert.Equal(t, "OBJ_RS_OBJ_team-a", StreamName(Bucket("RS", "team-a")))
	assert.Equal(t, "team-a/inv-1/payload", PayloadName("team-a", "inv-1"))
	assert.Equal(t, "team-a/inv-1/result/2", ResultName("team-a", "inv-1", 2))
	assert.Equal(t, 256<<10, ChunkSize(1<<20))
	assert.Equal(t, 32<<10, ChunkSize(64<<10))
	assert.True(t, Inline(1<<20-Headroom, 1<<20))
	assert.False(t, Inline(1<<20-Headroom+1, 1<<20))
}

// TestPutGet stores and reads objects on a real nats-server: the bytes come
// back as stored, and a reference that does not match the object (size,
// chunks, digest, a missing object) is a permanent error, never other bytes.
func TestPutGet(t *testing.T) {
	nc := natsauth.Connect(t, natsauth.JetStream(t, nil).ClientURL())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := &Buckets{JS: js, Cfg: Config{StreamName: "RS", TTL: time.Hour, MaxBytes: 64 << 20}}
	obs, err := b.Ensure(ctx, "team-a")
	require.NoError(t, err)
	data := bytes.Repeat([]byte("0123456789"), 300_000) // 3 MB: several chunks
	ref, err := Put(ctx, obs, PayloadName("team-a", "inv-1"), data, nc.MaxPayload())
	require.NoError(t, err)
	assert.Equal(t, "RS_OBJ_team-a", ref.Bucket)
	assert.Equal(t, int64(len(data)), ref.Size)
	assert.Greater(t, ref.Chunks, 1)
	assert.Equal(t, Digest(data), ref.Digest)

	got, err := Get(ctx, js, ref, 0)
	require.NoError(t, err)
	assert.Equal(t, data, got)

	for _, tc := range []struct {
		name   string
		mutate func(*messages.ObjectRef)
		limit  int64
	}{
		{"over the limit", func(*messages.ObjectRef) {}, 1 << 20},
		{"wrong size", func(r *messages.ObjectRef) { r.Size-- }, 0},
		{"fewer chunks", func(r *messages.ObjectRef) { r.Chunks-- }, 0},
		{"wrong digest", func(r *messages.ObjectRef) { r.Digest = Digest([]byte("other")) }, 0},
		{"another chunk id", func(r *messages.ObjectRef) { r.NUID = "NOSUCHNUID" }, 0},
		{"no bucket", func(r *messages.ObjectRef) { r.Bucket = "RS_OBJ_team-b" }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ref
			tc.mutate(&r)
			got, err := Get(ctx, js, r, tc.limit)
			require.Error(t, err)
			assert.Nil(t, got)
			assert.True(t, Permanent(err), "permanent: %v", err)
		})
	}
}

// TestGetAfterPutClustered: an object stored through one server of a
// three-server cluster is read whole through another right after. Any
// replica answers a direct get, and a follower behind the newest writes
// said "not found" (57 of 300 such reads before), which Permanent takes
// for an object that is gone: the invocation failed for good. Followers
// answer direct gets a few seconds after the bucket is made, so the test
// reads past that.
func TestGetAfterPutClustered(t *testing.T) {
	a, servers := natsauth.Cluster(t, nil, 3)
	asQueue, err := a.QueueOption()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	js := make([]jetstream.JetStream, len(servers))
	buckets := make([]*Buckets, len(servers))
	for i, s := range servers {
		js[i], err = jetstream.New(natsauth.Connect(t, s.ClientURL(), asQueue))
		require.NoError(t, err)
		buckets[i] = &Buckets{JS: js[i], Cfg: Config{StreamName: "RS", TTL: time.Hour, MaxBytes: 256 << 20, Replicas: 3}}
	}
	data := bytes.Repeat([]byte("0123456789"), 60_000) // 600 KB: 3 chunks
	stores := make([]jetstream.ObjectStore, len(servers))
	for i, b := range buckets {
		stores[i], err = b.Ensure(ctx, "team-a")
		require.NoError(t, err)
		// A bucket just made takes writes once its stream has a leader
		// (before that a publish has no responders).
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err := Put(ctx, stores[i], "ready", []byte("x"), 1<<20)
			assert.NoError(c, err)
		}, 30*time.Second, 50*time.Millisecond)
	}
	var failed []string
	for i, start := 0, time.Now(); i < 100 || time.Since(start) < natsauth.FollowersServeDirectGets; i++ {
		ref, err := Put(ctx, stores[i%3], PayloadName("team-a", fmt.Sprintf("inv-%d", i%100)), data, 1<<20) // a name again replaces its object: the bucket stays bounded
		require.NoError(t, err)
		got, err := Get(ctx, js[(i+1)%3], ref, 0)
		if err != nil {
			failed = append(failed, err.Error())
			continue
		}
		require.Equal(t, data, got)
	}
	require.Empty(t, failed, "objects stored a moment before, read through another server")
}

// TestEnsureAsksAgainWhenAnAnswerIsLost: a create whose answer is lost (a
// relay in front of JetStream's API drops the first request) is asked
// again after createTry, not waited on for the caller's whole context (a
// 3-server cluster at load lost one: the test above waited 2 minutes).
func TestEnsureAsksAgainWhenAnAnswerIsLost(t *testing.T) {
	nc := natsauth.Connect(t, natsauth.JetStream(t, nil).ClientURL())
	var requests atomic.Int32
	relay, err := nc.Subscribe("lossy.API.>", func(m *nats.Msg) {
		if requests.Add(1) == 1 {
			return // lost
		}
		assert.NoError(t, nc.PublishRequest("$JS.API."+strings.TrimPrefix(m.Subject, "lossy.API."), m.Reply, m.Data))
	})
	require.NoError(t, err)
	defer func() { assert.NoError(t, relay.Unsubscribe()) }()
	js, err := jetstream.NewWithAPIPrefix(nc, "lossy.API")
	require.NoError(t, err)
	b := &Buckets{JS: js, Cfg: Config{StreamName: "RS", TTL: time.Hour, MaxBytes: 1 << 20}}
	ctx, cancel := context.WithTimeout(t.Context(), 3*createTry)
	defer cancel()
	obs, err := b.Ensure(ctx, "team-a")
	require.NoError(t, err)
	st, err := obs.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, "RS_OBJ_team-a", st.Bucket())
	assert.Greater(t, requests.Load(), int32(1), "the lost request was asked again")
}
