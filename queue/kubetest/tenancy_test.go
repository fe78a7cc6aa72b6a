package kubetest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
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
	"github.com/runplane/runplane/queue/activator"
	"github.com/runplane/runplane/queue/queuetest"
	"github.com/runplane/runplane/sidecar/sidecartest"
	"github.com/runplane/runplane/test/natsauth"
)

// tenants is a queue service watching all namespaces, with two tenant
// namespaces that each run a pool of the same name, and a "kubelet" that
// runs a worker (the real sidecar) for every Running Pod labelled with that pool name in
// any of the given namespaces. A Pod of liar namespaces runs a worker that
// claims to be of namespace claim instead (a sidecar lying about itself).
type tenants struct {
	t       testing.TB
	base    string
	natsURL string
	log     *sidecartest.Log
	pool    string
	claims  map[string]string // namespace → namespace its workers claim

	mu       sync.Mutex
	kubelets map[string]*sidecartest.Kubelet // by namespace
	// own is every Pod of a namespace's "workers" Deployment its kubelet
	// ever saw: the autoscaler adds Pods while the test runs, so a list
	// taken at one moment would miss the later ones.
	own map[string]map[string]bool
}

func deployment(ns, name, poolName string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{api.LabelPool: poolName, "app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{api.LabelPool: poolName}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "framework", Image: "framework"}},
					TerminationGracePeriodSeconds: ptr.To(int64(0))},
			},
		},
	}
}

// kubelet runs a real sidecar for every Running Pod of the pool in ns
// until the test ends.
func (tn *tenants) kubelet(ns string) {
	claim := ns
	if c, ok := tn.claims[ns]; ok {
		claim = c
	}
	k := &sidecartest.Kubelet{Client: env.Client(), Namespace: ns, Selector: api.LabelPool + "=" + tn.pool,
		Config: func(*corev1.Pod) (sidecartest.Config, error) {
			return sidecartest.Config{NATSURL: tn.natsURL, Namespace: claim, Pool: tn.pool, Concurrency: 4, Heartbeat: 200 * time.Millisecond, Log: tn.log}, nil
		},
		OnPod: func(pod *corev1.Pod) {
			// Owned, not labelled: a ReplicaSet of Deployment "workers".
			if c := metav1.GetControllerOf(pod); c == nil || c.Kind != "ReplicaSet" || !strings.HasPrefix(c.Name, "workers-") {
				return
			}
			tn.mu.Lock()
			defer tn.mu.Unlock()
			tn.own[ns][pod.Name] = true
		},
		OnError: func(err error) { tn.t.Log(err) }}
	tn.mu.Lock()
	if tn.kubelets == nil {
		tn.kubelets = map[string]*sidecartest.Kubelet{}
		tn.own = map[string]map[string]bool{}
	}
	tn.kubelets[ns] = k
	tn.own[ns] = map[string]bool{}
	tn.mu.Unlock()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); k.Run(ctx) }()
	tn.t.Cleanup(func() { stop(); <-done })
}

// owns reports whether Pod name was ever one of the "workers"
// Deployment's in namespace ns.
func (tn *tenants) owns(ns, name string) bool {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return tn.own[ns][name]
}

// running reports whether the worker of Pod namespace/name runs.
func (tn *tenants) running(key string) bool {
	ns, name, _ := strings.Cut(key, "/")
	tn.mu.Lock()
	k := tn.kubelets[ns]
	tn.mu.Unlock()
	return k != nil && k.Running(name)
}

// do sends a request; a transport error is code 0 with the error as body
// (safe inside require.Eventually, which polls on another goroutine).
func (tn *tenants) do(method, path string, body any) (int, []byte) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, tn.base+path, rd)
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.Header.Set("Content-Type", "application/json")
	r, err := http.DefaultClient.Do(req)
	if err != nil { // callers poll, or assert the code (0)
		return 0, []byte(err.Error())
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, b
}

// TestTenantPoolsAreTheirOwn: two namespaces run a pool of the same name;
// each gets only its own invocations, run only by Pods its own Deployment
// owns. A bare Pod labelled with the pool in the pool's namespace, and a
// worker of another namespace that claims to be of the victim's, never
// receive work. Invocation IDs are per namespace, and one namespace cannot
// read or cancel another's. Two Deployments claiming one pool are reported
// and never merged.
func TestTenantPoolsAreTheirOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	a, b, liar := "tenant-a", "tenant-b", "tenant-liar"
	for _, n := range []string{a, b, liar} {
		require.NoError(t, env.CreateNamespace(ctx, n))
	}
	srv := natsauth.JetStream(t, nil)
	tn := &tenants{t: t, natsURL: srv.ClientURL(), log: sidecartest.NewLog(), pool: "echo", claims: map[string]string{liar: a}}

	for _, n := range []string{a, b, liar} {
		_, err := env.Client().AppsV1().Deployments(n).Create(ctx, deployment(n, "workers", tn.pool, 1), metav1.CreateOptions{})
		require.NoError(t, err)
		tn.kubelet(n)
	}
	// A bare Pod in the victim's namespace, labelled with its pool.
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: a, Labels: map[string]string{api.LabelPool: tn.pool}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}, TerminationGracePeriodSeconds: ptr.To(int64(0))}}
	_, err := env.Client().CoreV1().Pods(a).Create(ctx, bare, metav1.CreateOptions{})
	require.NoError(t, err)

	tn.base = queuetest.Run(t, queue.Config{NATS: queue.NATS{URL: srv.ClientURL()}, InsecureDisableCallerAuth: true,
		RESTConfig: env.RESTConfig(), Decisions: activator.Decisions{Workers: activator.Workers{HeartbeatTimeout: metav1.Duration{Duration: 2 * time.Second}}, Backoff: 100 * time.Millisecond}, Tick: 100 * time.Millisecond}).Base

	// Barrier: the intruder and the liar run their workers, and both
	// tenants' own workers are ready.
	require.Eventually(t, func() bool {
		for _, n := range []string{a, b} {
			code, body := tn.do("GET", "/v1/namespaces/"+n+"/pools/"+tn.pool, nil)
			var info struct {
				Status struct{ Capacity int } `json:"status"`
			}
			if code != 200 || json.Unmarshal(body, &info) != nil || info.Status.Capacity != 4 {
				return false
			}
		}
		pods, err := env.Client().CoreV1().Pods(liar).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) != 1 || !tn.running(liar+"/"+pods.Items[0].Name) {
			return false
		}
		return tn.running(a + "/intruder")
	}, 60*time.Second, 100*time.Millisecond, "tenant workers ready, intruder and liar running")

	// The same IDs in both namespaces: two invocations each.
	const n = 12
	for i := range n {
		for _, ns := range []string{a, b} {
			code, body := tn.do("POST", "/v1/namespaces/"+ns+"/pools/"+tn.pool+"/invocations",
				map[string]any{"mode": "async", "invocationID": fmt.Sprintf("inv-%d", i), "payload": map[string]string{"tenant": ns}})
			require.Equal(t, http.StatusAccepted, code, "%s: %s", ns, body)
			require.NotContains(t, string(body), `"duplicate":true`, "IDs are per namespace")
		}
	}
	for _, ns := range []string{a, b} {
		for i := range n {
			id := fmt.Sprintf("inv-%d", i)
			var rec messages.Record
			require.Eventually(t, func() bool {
				code, body := tn.do("GET", "/v1/namespaces/"+ns+"/invocations/"+id, nil)
				return code == 200 && json.Unmarshal(body, &rec) == nil && rec.State.Terminal()
			}, 30*time.Second, 50*time.Millisecond, "%s/%s finishes", ns, id)
			assert.Equal(t, messages.StateSucceeded, rec.State, "%s/%s", ns, id)
			assert.Equal(t, ns, rec.Namespace)
			assert.True(t, tn.owns(ns, rec.Worker), "%s/%s ran on %q, not on a Pod of the namespace's Deployment", ns, id, rec.Worker)
			require.NotNil(t, rec.Response)
			assert.JSONEq(t, fmt.Sprintf(`{"tenant":%q}`, ns), string(rec.Response.Body), "%s/%s got its own payload", ns, id)
			for _, w := range tn.log.Runs(id) {
				assert.True(t, tn.owns(a, w) || tn.owns(b, w), "%s ran on %s, neither tenant's own worker", id, w)
			}
		}
	}

	// Only in a: b can neither read nor cancel it, and the answer is the
	// one for an ID that does not exist.
	code, body := tn.do("POST", "/v1/namespaces/"+a+"/pools/"+tn.pool+"/invocations", map[string]any{"mode": "async", "invocationID": "only-a"})
	require.Equal(t, http.StatusAccepted, code, "%s", body)
	for _, probe := range []struct{ method, path string }{
		{"GET", "/v1/namespaces/" + b + "/invocations/only-a"},
		{"POST", "/v1/namespaces/" + b + "/invocations/only-a/cancel"},
	} {
		code, body := tn.do(probe.method, probe.path, nil)
		assert.Equal(t, http.StatusNotFound, code, "%s %s: %s", probe.method, probe.path, body)
		_, missing := tn.do(probe.method, strings.Replace(probe.path, "only-a", "never-posted", 1), nil)
		assert.JSONEq(t, strings.ReplaceAll(string(missing), "never-posted", "only-a"), string(body), "same answer as for a missing ID")
	}
	code, _ = tn.do("GET", "/v1/namespaces/"+a+"/invocations/only-a", nil)
	assert.Equal(t, http.StatusOK, code)

	// Two Deployments claim a's pool: reported, never merged.
	_, err = env.Client().AppsV1().Deployments(a).Create(ctx, deployment(a, "workers2", tn.pool, 0), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		code, body := tn.do("POST", "/v1/namespaces/"+a+"/pools/"+tn.pool+"/invocations", map[string]any{"mode": "async"})
		return code == http.StatusConflict && strings.Contains(string(body), "workers, workers2")
	}, 30*time.Second, 100*time.Millisecond, "invoke answers 409 naming both Deployments")
	code, body = tn.do("GET", "/v1/namespaces/"+a+"/pools/"+tn.pool, nil)
	require.Equal(t, 200, code)
	assert.Contains(t, string(body), `"conflict":["workers","workers2"]`)
	code, _ = tn.do("POST", "/v1/namespaces/"+b+"/pools/"+tn.pool+"/invocations", map[string]any{"mode": "async"})
	assert.Equal(t, http.StatusAccepted, code, "the other tenant's pool of the same name is not affected")
	require.Eventually(t, func() bool {
		evs, err := env.Client().EventsV1().Events(a).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		warned := map[string]bool{}
		for _, e := range evs.Items {
			if e.Reason == activator.ReasonPoolConflict && e.Type == corev1.EventTypeWarning && e.Regarding.Kind == "Deployment" {
				warned[e.Regarding.Name] = true
			}
		}
		return warned["workers"] && warned["workers2"]
	}, 30*time.Second, 100*time.Millisecond, "a Warning Event on both Deployments")
	require.NoError(t, env.Client().AppsV1().Deployments(a).Delete(ctx, "workers2", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		code, _ := tn.do("POST", "/v1/namespaces/"+a+"/pools/"+tn.pool+"/invocations", map[string]any{"mode": "async"})
		return code == http.StatusAccepted
	}, 30*time.Second, 100*time.Millisecond, "served again once one Deployment is left")
}
