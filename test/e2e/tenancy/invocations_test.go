package tenancy

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
)

// connectWorker connects as pod's sidecar does, with the Pod's own bound
// token and its inbox; the connection's violations are on the channel.
func (q *queueNATS) connectWorker(t *testing.T, ns, pool string, pod *corev1.Pod) (*nats.Conn, <-chan error) {
	t.Helper()
	nc, violations, err := q.connect(token(t, ns, "worker", []string{api.NATSTokenAudience}, bound(pod)), messages.WorkerInbox(ns, pool, pod.Name))
	require.NoError(t, err, "%s's own token", pod.Name)
	t.Cleanup(nc.Close)
	return nc, violations
}

// submit posts the async invocation id ({"prompt":"hello"}), requires it
// accepted and says whether the ack calls it a duplicate.
func (q *queueNATS) submit(t *testing.T, ns, pool, id string) (duplicate bool) {
	t.Helper()
	resp, err := http.Post(q.ingress+"/v1/namespaces/"+ns+"/pools/"+pool+"/invocations", "application/json",
		strings.NewReader(`{"mode":"async","invocationID":"`+id+`","payload":{"prompt":"hello"}}`))
	require.NoError(t, err)
	var ack struct {
		Duplicate bool
		Error     string
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ack))
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusAccepted, resp.StatusCode, ack.Error)
	return ack.Duplicate
}

// finished waits until the invocation id is terminal and returns it.
func (q *queueNATS) finished(t *testing.T, ns, id string) messages.Record {
	t.Helper()
	var rec messages.Record
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := http.Get(q.ingress + "/v1/namespaces/" + ns + "/invocations/" + id)
		require.NoError(c, err)
		defer resp.Body.Close()
		require.Equal(c, http.StatusOK, resp.StatusCode)
		require.NoError(c, json.NewDecoder(resp.Body).Decode(&rec))
		require.True(c, rec.State.Terminal(), "state %s", rec.State)
	}, 90*time.Second, 200*time.Millisecond, "invocation %s/%s never finished", ns, id)
	return rec
}

// holding is a real sidecar whose handler holds each invocation until
// release is closed, counting its runs.
type holding struct {
	started chan struct{}
	release chan struct{}
	runs    atomic.Int32
}

// runHolding runs pod's real sidecar with a holding handler.
func runHolding(t *testing.T, ctx context.Context, q *queueNATS, ns, pool string, pod *corev1.Pod) *holding {
	t.Helper()
	h := &holding{started: make(chan struct{}, 4), release: make(chan struct{})}
	runSidecar(t, ctx, q, ns, pool, pod, func(ctx context.Context, req framework.Request) (framework.Response, error) {
		h.runs.Add(1)
		h.started <- struct{}{}
		select {
		case <-h.release:
		case <-ctx.Done():
		}
		return framework.Response{Body: req.Payload}, nil
	})
	return h
}

// waitStarted waits until the handler holds an invocation.
func (h *holding) waitStarted(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-h.started:
	case <-ctx.Done():
		t.Fatal("the sidecar never ran the invocation")
	}
}

// requireViolation waits for NATS's permission violation of a publish on
// subject.
func requireViolation(t *testing.T, violations <-chan error, subject string) {
	t.Helper()
	select {
	case err := <-violations:
		require.ErrorContains(t, err, "Permissions Violation")
		require.ErrorContains(t, err, `"`+subject+`"`)
	case <-time.After(15 * time.Second):
		t.Fatalf("no permission violation for a publish on %s", subject)
	}
}
