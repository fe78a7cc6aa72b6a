package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/runplane/runplane/api"
)

// post sends body to the extender's path and returns the status and body.
func (h *harness) post(t *testing.T, path string, body any) (int, string) {
	t.Helper()
	data, err := json.Marshal(body)
	require.NoError(t, err)
	resp, err := h.https.Post("https://"+h.addr+path, "application/json", bytes.NewReader(data))
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(out)
}

// TestForeignPodRefused: /filter and /bind called by hand (as a hostile
// caller would, with the request bodies kube-scheduler sends) for a Pod
// another scheduler owns, or for a runplane Pod under another UID, answer
// 4xx and leave the Pod unbound and unannotated — on the unguarded
// extender a bare POST bound a foreign Pod to a GPU node and the filter
// patched a claim onto it. A placeholder sits on the node, so a filter
// that acted would record a claim.
func TestForeignPodRefused(t *testing.T) {
	h := setup(t)
	ctx := t.Context()
	ns := env.Namespace(t, "foreign")
	nodes := addNodes(t, "foreign", 1, 1)
	stockDeployment(t, h.client, ns, "stock-g1", "g1", "foreign", 1)
	require.Eventually(t, func() bool {
		pods, err := listPods(ctx, h.client, ns, "app=stock-g1")
		return err == nil && len(pods) == 1 && running(&pods[0])
	}, 60*time.Second, poll, "the placeholder running on %s", nodes[0])

	// Another scheduler's Pod (nothing schedules it: it stays Pending).
	foreign := gpuPod("foreign", "g1", "foreign")
	foreign.Spec.SchedulerName = "someone-elses-scheduler"
	foreign = createPod(t, h.client, ns, foreign)
	// A runplane Pod, gated so the real scheduler leaves it alone.
	ours := gpuPod("ours", "g1", "foreign")
	ours.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "e2e.runplane.io/hold"}}
	ours = createPod(t, h.client, ns, ours)
	forged := ours.DeepCopy()
	forged.UID = "00000000-0000-0000-0000-000000000000"

	tests := []struct {
		name   string
		pod    *corev1.Pod
		status int
	}{
		{"another scheduler's Pod", foreign, http.StatusForbidden},
		{"a runplane Pod under another UID", forged, http.StatusConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := h.post(t, "/filter", extenderv1.ExtenderArgs{Pod: tt.pod, NodeNames: &nodes})
			assert.Equal(t, tt.status, code, "filter: %s", body)
			assert.Contains(t, body, `"error"`)
			code, body = h.post(t, "/bind", extenderv1.ExtenderBindingArgs{
				PodName: tt.pod.Name, PodNamespace: tt.pod.Namespace, PodUID: tt.pod.UID, Node: nodes[0]})
			assert.Equal(t, tt.status, code, "bind: %s", body)
			p, err := h.client.CoreV1().Pods(ns).Get(ctx, tt.pod.Name, metav1.GetOptions{})
			require.NoError(t, err)
			assert.Empty(t, p.Spec.NodeName, "the Pod was bound")
			assert.NotContains(t, p.Annotations, api.AnnotationClaimedStock, "the Pod was annotated")
		})
	}
	// The placeholder is still there: nothing claimed it.
	pods, err := listPods(ctx, h.client, ns, "app=stock-g1")
	require.NoError(t, err)
	require.Len(t, pods, 1)
	require.Equal(t, nodes[0], pods[0].Spec.NodeName)
}
