package tenancy

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/sidecar/sidecartest"
)

// TestSidecarThroughCallout: the real sidecar, with nothing but its Pod's
// bound token in a file, connects through the real queue's callout, takes
// a dispatch from its own consumer, calls its framework and publishes the
// result and the sync reply: everything a worker does is within what the
// callout grants (a permission violation would fail the invocation).
func TestSidecarThroughCallout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tenant(t, "nats-c", "worker")
	pod := poolPod(t, "nats-c", "echo")
	q := startQueueNATS(t, ctx)
	ns, pool := "nats-c", "echo"

	tokenFile := runSidecar(t, ctx, q, ns, pool, pod)

	// Registered: its heartbeat arrives on its pool's metrics subject.
	events, err := q.internal.SubscribeSync(q.subj.Events(ns, pool, pod.Name))
	require.NoError(t, err)
	results, err := q.internal.SubscribeSync(q.subj.Result(ns, pool))
	require.NoError(t, err)
	reply := q.subj.Reply(ns, pool) + ".replica-1.inv-1"
	replies, err := q.internal.SubscribeSync(reply)
	require.NoError(t, err)
	require.NoError(t, q.internal.Flush())
	_, err = events.NextMsg(30 * time.Second)
	require.NoError(t, err, "no event from the sidecar: it did not connect through the callout")

	d := messages.Dispatch{Invocation: messages.Invocation{InvocationID: "inv-1", Namespace: ns, Pool: pool, Mode: messages.ModeSync,
		Payload: json.RawMessage(`{"prompt":"hello"}`), ReplyTo: reply, AcceptedAt: time.Now()}, Worker: pod.Name, Attempt: 1, DispatchedAt: time.Now()}
	data, err := json.Marshal(d)
	require.NoError(t, err)
	ijs, err := jetstream.New(q.internal)
	require.NoError(t, err)
	// The consumer exists once the sidecar is ready; publishing earlier is
	// fine too (DeliverAll).
	_, err = ijs.Publish(ctx, q.subj.Dispatch(ns, pool, pod.Name), data, jetstream.WithMsgID(messages.DispatchPublishID(ns, "inv-1", 1)))
	require.NoError(t, err)

	for name, sub := range map[string]*nats.Subscription{"result": results, "sync reply": replies} {
		msg, err := sub.NextMsg(30 * time.Second)
		require.NoError(t, err, "no %s", name)
		var res messages.Result
		require.NoError(t, json.Unmarshal(msg.Data, &res), name)
		assert.Equal(t, messages.StateSucceeded, res.State, "%s: %+v", name, res)
		assert.JSONEq(t, `{"prompt":"hello"}`, string(res.Response.Body), name)
	}

	// Rotation: the kubelet rewrites the file; when the connection ends
	// (the NATS user expires with the old token; here the server drops it)
	// the sidecar reconnects through the callout with the new token and
	// keeps working.
	sidecarConn := func() uint64 {
		conns, err := q.srv.Connz(&server.ConnzOptions{})
		require.NoError(t, err)
		for _, c := range conns.Conns {
			if strings.HasPrefix(c.Name, "runplane-sidecar/") {
				return c.Cid
			}
		}
		return 0
	}
	first := sidecarConn()
	require.NotZero(t, first, "the sidecar's connection")
	require.NoError(t, os.WriteFile(tokenFile+".new", []byte(token(t, ns, "worker", []string{api.NATSTokenAudience}, bound(pod))), 0o600))
	require.NoError(t, os.Rename(tokenFile+".new", tokenFile))
	require.NoError(t, q.srv.DisconnectClientByID(first))
	require.Eventually(t, func() bool { c := sidecarConn(); return c != 0 && c != first }, 30*time.Second, 50*time.Millisecond, "the sidecar reconnected")
	d.InvocationID, d.ReplyTo = "inv-2", ""
	data, err = json.Marshal(d)
	require.NoError(t, err)
	_, err = ijs.Publish(ctx, q.subj.Dispatch(ns, pool, pod.Name), data, jetstream.WithMsgID(messages.DispatchPublishID(ns, "inv-2", 1)))
	require.NoError(t, err)
	msg, err := results.NextMsg(30 * time.Second)
	require.NoError(t, err, "no result after the reconnect")
	var res messages.Result
	require.NoError(t, json.Unmarshal(msg.Data, &res))
	assert.Equal(t, "inv-2", res.InvocationID)
	assert.Equal(t, messages.StateSucceeded, res.State, "%+v", res)
}

// runSidecar runs the real sidecar of pod (pool ns/pool) with an echo
// framework (or handler, when given), its only credential the Pod's bound
// token in the returned file, until the test ends.
func runSidecar(t *testing.T, ctx context.Context, q *queueNATS, ns, pool string, pod *corev1.Pod, handler ...framework.HandlerFunc) string {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token(t, ns, "worker", []string{api.NATSTokenAudience}, bound(pod))), 0o600))
	cfg := sidecartest.Config{NATSURL: q.srv.ClientURL(), TLS: q.auth.Client, TokenFile: tokenFile, JSAPIPrefix: api.WorkerJSAPIPrefix,
		SubjectPrefix: q.subj.Prefix, StreamName: q.stream, Namespace: ns, Pool: pool, Name: pod.Name, Heartbeat: 200 * time.Millisecond}
	if len(handler) > 0 {
		cfg.Handler = handler[0]
	}
	w, err := sidecartest.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, w.Close(), "sidecar.Run") })
	return tokenFile
}
