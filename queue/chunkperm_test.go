package queue

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/natscallout"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/natsauth"
)

// TestWorkerChunkPermissions: with the permissions the auth callout
// grants, enforced by a real nats-server, a worker stores chunks under its
// own name in its namespace's chunks stream and is refused a sibling's
// name (which a reader would take as the sibling's output), another
// pool's and another namespace's.
func TestWorkerChunkPermissions(t *testing.T) {
	sc := stream.Config{}.WithDefaults()
	id := natscallout.Identity{Namespace: "team-a", Pool: "echo", Worker: "echo-1"}
	p := natscallout.WorkerPermissions(WorkerLayout(sc)(id))
	srv := natsauth.JetStream(t, func(o *server.Options) {
		o.Users = []*server.User{
			{Username: "queue", Password: "q"},
			{Username: "worker", Password: "w", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: p.Pub.Allow, Deny: p.Pub.Deny},
				Subscribe: &server.SubjectPermission{Allow: p.Sub.Allow, Deny: p.Sub.Deny},
			}},
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	qc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("queue", "q"))
	require.NoError(t, err)
	defer qc.Close()
	qjs, err := jetstream.New(qc)
	require.NoError(t, err)
	st, err := stream.Open(ctx, qjs, sc)
	require.NoError(t, err)

	violations := make(chan error, 8)
	wc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("worker", "w"), nats.CustomInboxPrefix(messages.WorkerInbox(id.Namespace, id.Pool, id.Worker)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	require.NoError(t, err)
	defer wc.Close()
	wjs, err := jetstream.New(wc)
	require.NoError(t, err)
	subj := messages.Subjects{Prefix: sc.Prefix}
	// Both namespaces' streams exist: a forged chunk that got through
	// would be stored.
	chunksA, err := st.Chunks.Ensure(ctx, "team-a")
	require.NoError(t, err)
	chunksB, err := st.Chunks.Ensure(ctx, "team-b")
	require.NoError(t, err)

	ack, err := wjs.Publish(ctx, subj.ChunkSubject("team-a", "echo", "echo-1", "inv-1"), []byte("tok"))
	require.NoError(t, err, "its own chunk")
	assert.Equal(t, messages.ChunksStreamName(sc.Stream, "team-a"), ack.Stream)
	_, err = chunksA.GetLastMsgForSubject(ctx, subj.ChunkSubject("team-a", "echo", "echo-1", "inv-1"))
	require.NoError(t, err)

	for _, tc := range []struct {
		subject string
		stream  jetstream.Stream
	}{
		{subj.ChunkSubject("team-a", "echo", "echo-2", "inv-1"), chunksA}, // a sibling's name
		{subj.ChunkSubject("team-a", "other", "echo-1", "inv-1"), chunksA},
		{subj.ChunkSubject("team-b", "echo", "echo-1", "inv-1"), chunksB},
	} {
		s := tc.subject
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		_, err := wjs.Publish(pctx, s, []byte("forged"))
		pcancel()
		require.Error(t, err, s)
		select {
		case v := <-violations:
			assert.ErrorContains(t, v, "Permissions Violation for Publish to \""+s+"\"")
		case <-time.After(5 * time.Second):
			t.Fatalf("no permission violation for %s", s)
		}
		_, err = tc.stream.GetLastMsgForSubject(ctx, s)
		assert.ErrorIs(t, err, jetstream.ErrMsgNotFound, "nothing stored on %s", s)
	}
}
