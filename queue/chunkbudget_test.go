package queue

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/natscallout"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/natsauth"
)

// limitedJetStream starts a real nats-server whose JetStream file storage
// is maxFileStore bytes (from a configuration file: an Options field alone
// is overridden by the disk's size).
func limitedJetStream(t *testing.T, maxFileStore int64) jetstream.JetStream {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, "listen: \"127.0.0.1:-1\"\njetstream { store_dir: %q, max_file_store: %d }\n", filepath.Join(dir, "js"), maxFileStore), 0o600))
	js, err := jetstream.New(natsauth.Connect(t, natsauth.FromConfig(t, conf).ClientURL()))
	require.NoError(t, err)
	return js
}

// TestChunksAreBudgetedPerNamespace: tenant A floods its chunks stream far
// beyond its budget; tenant B's retained chunks are all still there (each
// namespace's stream drops only its own oldest), and A lost its oldest.
func TestChunksAreBudgetedPerNamespace(t *testing.T) {
	js := limitedJetStream(t, 8<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := stream.Open(ctx, js, stream.Config{ResultsMaxBytes: 256 << 10, ResultMaxMsgSize: 64 << 10, ObjectsMaxBytes: 256 << 10,
		ChunksConfig: stream.ChunksConfig{MaxBytes: 128 << 10, MaxChunkBytes: 16 << 10}})
	require.NoError(t, err)
	subj := st.Subjects
	chunksB, err := st.Chunks.Ensure(ctx, "team-b")
	require.NoError(t, err)
	for i := range 3 {
		_, err := js.Publish(ctx, subj.ChunkSubject("team-b", "llm", "llm-1", "story"), fmt.Appendf(nil, "tok%d", i))
		require.NoError(t, err)
	}
	chunksA, err := st.Chunks.Ensure(ctx, "team-a")
	require.NoError(t, err)
	flood := make([]byte, 12<<10)
	for i := range 40 { // 480 KiB into a 128 KiB budget
		_, err := js.Publish(ctx, subj.ChunkSubject("team-a", "flood", "flood-1", fmt.Sprint("inv", i)), flood)
		require.NoError(t, err)
	}

	info, err := chunksB.Info(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 3, info.State.Msgs, "B's chunks after A's flood")
	assert.EqualValues(t, 1, info.State.FirstSeq)
	infoA, err := chunksA.Info(ctx)
	require.NoError(t, err)
	assert.Greater(t, infoA.State.FirstSeq, uint64(1), "A's flood made room in A's own stream")
	assert.LessOrEqual(t, infoA.State.Bytes, uint64(128<<10))
}

// TestAdmitWorkerWithoutRoomForItsChunks: JetStream storage with room for
// one namespace's chunks stream, not two. A's is made; B's worker is still
// admitted (its consumer made, the stream's failure logged), and A's
// stream is untouched: a namespace without room breaks no admission, its
// own or another's.
func TestAdmitWorkerWithoutRoomForItsChunks(t *testing.T) {
	js := limitedJetStream(t, 3<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := stream.Open(ctx, js, stream.Config{ResultsMaxBytes: 256 << 10, ResultMaxMsgSize: 64 << 10, ObjectsMaxBytes: 256 << 10,
		ChunksConfig: stream.ChunksConfig{MaxBytes: 2 << 20, MaxChunkBytes: 16 << 10}})
	require.NoError(t, err)
	_, err = st.Chunks.Ensure(ctx, "team-a")
	require.NoError(t, err)
	_, err = st.Chunks.Ensure(ctx, "team-b")
	var noRoom *stream.ChunksNoRoomError
	require.ErrorAs(t, err, &noRoom, "B's stream fits: the test shows nothing")
	require.ErrorContains(t, err, "chunks-max-bytes")

	for _, ns := range []string{"team-b", "team-a"} {
		id := natscallout.Identity{Namespace: ns, Pool: "echo", Worker: "echo-1"}
		a := &admitWorker{Authenticator: fakeAuth{id: id}, Consumers: st, Chunks: st.Chunks, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		_, err = a.Authenticate(ctx, "token")
		require.NoError(t, err, "a worker of %s refused for want of chunk storage", ns)
		_, err = js.Consumer(ctx, st.Config.Stream, st.Config.WorkerConsumerConfig(ns, "echo", "echo-1").Durable)
		require.NoError(t, err, "the worker's consumer")
	}
	_, err = js.Stream(ctx, messages.ChunksStreamName(st.Config.Stream, "team-a"))
	require.NoError(t, err, "A's chunks stream")
	// The admissions themselves made nothing of B's: no half-made stream.
	_, err = js.Stream(ctx, messages.ChunksStreamName(st.Config.Stream, "team-b"))
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "B's chunks stream")
}
