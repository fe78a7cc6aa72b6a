package tenancy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
)

// TestWorkerCannotForgeSiblingChunks: two workers of one pool, each
// through the real callout with its own Pod's token. While the victim's
// real sidecar runs an invocation, mallory, its sibling, tries to add
// output to it: NATS refuses a chunk under the victim's name (permission
// violation); one under mallory's own name is stored (its grant) but the
// ingress never sends it — the Record says the victim holds the attempt —
// so the invocation's stream is exactly the victim's answer.
func TestWorkerCannotForgeSiblingChunks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, pool := "nats-chunks", "echo" // its own namespace: TestSidecarThroughCallout has nats-c/echo
	tenant(t, ns, "worker")
	pods := poolPods(t, ns, pool, 2)
	victim, mallory := pods[0], pods[1]
	q := startQueueNATS(t, ctx, withIngress(ns))

	held := runHolding(t, ctx, q, ns, pool, victim)
	nc, violations := q.connectWorker(t, ns, pool, mallory)

	const id = "chunks-1"
	q.submit(t, ns, pool, id)
	held.waitStarted(t, ctx)

	forged := nats.NewMsg(q.subj.ChunkSubject(ns, pool, victim.Name, id))
	forged.Data = []byte("forged")
	forged.Header.Set(messages.ChunkAttemptHeader, "1")
	forged.Header.Set(messages.ChunkExecutionHeader, "mallory")
	forged.Header.Set(messages.ChunkSeqHeader, "1")
	require.NoError(t, nc.PublishMsg(forged))
	require.NoError(t, nc.Flush())
	requireViolation(t, violations, forged.Subject)
	// Under its own name it is stored, and ignored.
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	forged.Subject = q.subj.ChunkSubject(ns, pool, mallory.Name, id)
	_, err = js.PublishMsg(ctx, forged)
	require.NoError(t, err, "mallory's own chunk subject")

	close(held.release)
	req, err := http.NewRequestWithContext(ctx, "GET", q.ingress+"/v1/namespaces/"+ns+"/invocations/"+id+"/stream", nil)
	require.NoError(t, err)
	sresp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer sresp.Body.Close()
	require.Equal(t, http.StatusOK, sresp.StatusCode)
	body, err := io.ReadAll(sresp.Body) // the stream ends with its result
	require.NoError(t, err)
	assert.NotContains(t, string(body), "event: chunk", "mallory's chunk was sent")
	assert.NotContains(t, string(body), "forged")
	_, result, ok := strings.Cut(string(body), "event: result\ndata: ")
	require.True(t, ok, "no result event in %s", body)
	var rec messages.Record
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(result)), &rec))
	assert.Equal(t, messages.StateSucceeded, rec.State, "%+v", rec)
	assert.Equal(t, victim.Name, rec.Worker)
}
