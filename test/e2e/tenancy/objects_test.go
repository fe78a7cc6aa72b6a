package tenancy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/stream"
)

// TestObjectStorageIsBudgetedPerNamespace: JetStream storage sized for two
// namespaces' object budgets plus the streams (nats-server reserves a
// stream's MaxBytes when it is created). Tenant A creates many pools and
// fills object storage with big payloads until its budget is used up (503
// naming the limit). Tenant B's big payload is still accepted, its worker
// is still admitted through the callout and runs it: A's pools share A's
// one bucket and never reserve B's room.
func TestObjectStorageIsBudgetedPerNamespace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const budget = 512 << 10
	tenant(t, "objs-a", "worker")
	tenant(t, "objs-b", "worker")
	const poolsA = 6
	for i := range poolsA {
		labels := map[string]string{api.LabelPool: fmt.Sprintf("p%d", i)}
		_, err := env.Client().AppsV1().Deployments("objs-a").Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: labels[api.LabelPool], Labels: labels},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec()}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	podB := poolPod(t, "objs-b", "echo")
	// Room for the results stream and two namespace budgets (object bucket
	// + chunks stream, 640 KiB each), not three.
	q := startQueueNATSConf(t, ctx, "max_file_store: 1703936", "max_payload: 65536", func(c *queue.Config) {
		c.DisableIngress, c.InsecureDisableCallerAuth, c.Namespace, c.Listen = false, true, "", "127.0.0.1:0"
		c.Stream.ResultsMaxBytes, c.Stream.ResultMaxMsgSize, c.Stream.ObjectsMaxBytes = 256<<10, 64<<10, budget
		// Each namespace's chunks stream reserves its bound too: 128 KiB.
		c.Stream.ChunksConfig = stream.ChunksConfig{MaxBytes: 128 << 10, MaxChunkBytes: 16 << 10}
	})
	post := func(ns, pool, body string) (int, string) {
		resp, err := http.Post(q.ingress+"/v1/namespaces/"+ns+"/pools/"+pool+"/invocations", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	big := func(id string) string {
		return `{"mode":"async","invocationID":"` + id + `","payload":"` + strings.Repeat("x", 100<<10) + `"}`
	}

	// Every pool of A takes invocations (each would have made a bucket of
	// its own before).
	for i := range poolsA {
		pool := fmt.Sprintf("p%d", i)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			code, body := post("objs-a", pool, `{"mode":"async","payload":{}}`)
			require.Equal(c, http.StatusAccepted, code, body)
		}, 30*time.Second, 100*time.Millisecond, "pool %s of A", pool)
	}
	// A fills its budget with big payloads across its pools.
	var full string
	for i := 0; i < 4*budget/(100<<10) && full == ""; i++ {
		code, body := post("objs-a", fmt.Sprintf("p%d", i%poolsA), big(fmt.Sprintf("a-%d", i)))
		switch code {
		case http.StatusAccepted:
		case http.StatusServiceUnavailable:
			full = body
		default:
			t.Fatalf("A's big payload %d: %d %s", i, code, body)
		}
	}
	require.NotEmpty(t, full, "A's big payloads never filled its budget")
	assert.Contains(t, full, "objects-max-bytes", "the 503 names the limit")

	// B: its big payload is accepted, its worker admitted, and it runs.
	code, body := post("objs-b", "echo", big("b-1"))
	require.Equal(t, http.StatusAccepted, code, body)
	runSidecar(t, ctx, q, "objs-b", "echo", podB)
	rec := q.finished(t, "objs-b", "b-1")
	require.Equal(t, messages.StateSucceeded, rec.State, "%+v", rec)
	require.NotNil(t, rec.Response)
	assert.Equal(t, `"`+strings.Repeat("x", 100<<10)+`"`, string(rec.Response.Body))
}
