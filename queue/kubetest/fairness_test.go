package kubetest_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/activator"
	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/queue/queuetest"
	"github.com/runplane/runplane/test/natsauth"
)

// TestNamespaceFairness: on the real control plane, a pool's
// runplane.io/max-backlog (on its Deployment) and the namespace's backlog
// limit answer 429 to that tenant only, naming the limit; another tenant is
// admitted meanwhile. An invalid annotation is reported (Warning Event
// PolicyInvalid on the Deployment, policyError in the pool status) and the
// default applies.
func TestNamespaceFairness(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	a, b := "fair-a", "fair-b"
	for _, n := range []string{a, b} {
		require.NoError(t, env.CreateNamespace(ctx, n))
	}
	srv := natsauth.JetStream(t, nil)

	// No kubelet runs workers here: what is accepted stays queued.
	deps := []struct{ ns, name, pool, maxBacklog string }{
		{a, "small", "p1", "2"}, {a, "big", "p2", ""}, {b, "typo", "p1", "lots"},
	}
	for _, d := range deps {
		dep := deployment(d.ns, d.name, d.pool, 0)
		if d.maxBacklog != "" {
			dep.Annotations = map[string]string{api.AnnotationMaxBacklog: d.maxBacklog}
		}
		_, err := env.Client().AppsV1().Deployments(d.ns).Create(ctx, dep, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	tn := &tenants{t: t}
	tn.base = queuetest.Run(t, queue.Config{NATS: queue.NATS{URL: srv.ClientURL()}, InsecureDisableCallerAuth: true,
		RESTConfig: env.RESTConfig(), Tick: 100 * time.Millisecond, Decisions: activator.Decisions{Limits: pool.Limits{NamespaceMaxBacklog: 3}}}).Base
	// Barrier: the ingress knows the three pools.
	require.Eventually(t, func() bool {
		for _, d := range deps {
			if code, _ := tn.do("GET", "/v1/namespaces/"+d.ns+"/pools/"+d.pool, nil); code != 200 {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "pools known")

	steps := []struct {
		ns, pool string
		code     int
		limit    string
	}{
		{a, "p1", 202, ""},
		{a, "p1", 202, ""},
		{a, "p1", 429, "pool_backlog"}, // runplane.io/max-backlog: 2
		{a, "p2", 202, ""},
		{a, "p2", 429, "namespace_backlog"}, // 3 queued in fair-a
		{b, "p1", 202, ""},                  // fair-b is admitted meanwhile
		{b, "p1", 202, ""},                  // "lots" is invalid: the default pool limit (1000) applies
		{b, "p1", 202, ""},
		{b, "p1", 429, "namespace_backlog"},
	}
	for i, st := range steps {
		code, body := tn.do("POST", "/v1/namespaces/"+st.ns+"/pools/"+st.pool+"/invocations", map[string]any{"mode": "async"})
		require.Equal(t, st.code, code, "step %d %+v: %s", i, st, body)
		if code == http.StatusTooManyRequests {
			var e struct{ Limit, Namespace, Pool string }
			require.NoError(t, json.Unmarshal(body, &e))
			assert.Equal(t, st.limit, e.Limit, "step %d", i)
			assert.Equal(t, st.ns, e.Namespace, "step %d", i)
			assert.Equal(t, st.pool, e.Pool, "step %d", i)
		}
	}

	code, body := tn.do("GET", "/v1/namespaces/"+b+"/pools/p1", nil)
	require.Equal(t, 200, code)
	var info struct {
		PolicyError string `json:"policyError"`
	}
	require.NoError(t, json.Unmarshal(body, &info))
	assert.Contains(t, info.PolicyError, api.AnnotationMaxBacklog)
	require.Eventually(t, func() bool {
		evs, err := env.Client().EventsV1().Events(b).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == activator.ReasonPolicyInvalid && e.Type == corev1.EventTypeWarning && e.Regarding.Kind == "Deployment" && e.Regarding.Name == "typo" {
				return true
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "a Warning Event PolicyInvalid on the Deployment")
}
