package queue

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/natscallout"
	"github.com/runplane/runplane/internal/objects"
	"github.com/runplane/runplane/queue/stream"
)

// TestAdmitWorkerWithoutRoomForItsBucket: a real nats-server whose
// JetStream storage has room for the queue's streams but not for another
// namespace's object bucket (nats-server reserves a bucket's MaxBytes when
// it is made). The worker is still admitted — its consumer made, the
// bucket's failure logged — instead of being refused: storage used by
// other tenants never keeps a namespace's workers out.
func TestAdmitWorkerWithoutRoomForItsBucket(t *testing.T) {
	js := limitedJetStream(t, 1<<20)
	ctx := context.Background()
	st, err := stream.Open(ctx, js, stream.Config{ResultsMaxBytes: 256 << 10, ResultMaxMsgSize: 64 << 10, ObjectsMaxBytes: 2 << 20,
		ChunksConfig: stream.ChunksConfig{MaxBytes: 128 << 10, MaxChunkBytes: 16 << 10}})
	require.NoError(t, err)

	_, err = st.Objects.Ensure(ctx, "team-b")
	var noRoom *objects.NoRoomError
	require.ErrorAs(t, err, &noRoom, "the bucket fits: the test shows nothing")
	require.ErrorContains(t, err, "objects-max-bytes")

	id := natscallout.Identity{Namespace: "team-b", Pool: "echo", Worker: "echo-1"}
	a := &admitWorker{Authenticator: fakeAuth{id: id}, Consumers: st, Buckets: st.Objects, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	_, err = a.Authenticate(ctx, "token")
	require.NoError(t, err, "a worker refused for want of object storage")
	_, err = js.Consumer(ctx, st.Config.Stream, st.Config.WorkerConsumerConfig("team-b", "echo", "echo-1").Durable)
	require.NoError(t, err, "the worker's consumer")
}
