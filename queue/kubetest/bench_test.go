package kubetest_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/queuetest"
	"github.com/runplane/runplane/test/natsauth"
)

// BenchmarkWarmSyncAuth measures the warm sync path (HTTP ingress →
// JetStream → activator → worker (the real sidecar) → reply) with caller authentication
// on (bearer token, TokenReview and SubjectAccessReview on the real
// apiserver, caches warm) next to the same path with it off, in one run:
// two ingress replicas on one stream, one of them without authentication.
// It reports p50 and p99 of both and on's over off's (the goal: at most
// 1.10 at p50), from one loop whose calls alternate.
func BenchmarkWarmSyncAuth(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A namespace of its own each run: -count and b.N's rounds run it again
	// in this process, and its RoleBinding, ServiceAccount and Deployment
	// would exist already.
	ns := "bench-auth-" + utilrand.String(5)
	require.NoError(b, env.CreateNamespace(ctx, ns))
	_, err := env.Client().RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "runplane-invoker"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{callerauth.Group}, Resources: []string{"pools/invocations"}, Verbs: []string{"create", "get", "update"}}}},
		metav1.CreateOptions{})
	require.True(b, err == nil || apierrors.IsAlreadyExists(err), "%v", err)
	_, err = env.Client().RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "caller"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "runplane-invoker"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "caller"}}}, metav1.CreateOptions{})
	require.NoError(b, err)
	_, err = env.Client().CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "caller"}}, metav1.CreateOptions{})
	require.NoError(b, err)
	tr, err := env.Client().CoreV1().ServiceAccounts(ns).CreateToken(ctx, "caller",
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	require.NoError(b, err)

	srv := natsauth.JetStream(b, nil)
	tn := &tenants{t: b, natsURL: srv.ClientURL(), pool: "echo"}
	_, err = env.Client().AppsV1().Deployments(ns).Create(ctx, deployment(ns, "workers", tn.pool, 1), metav1.CreateOptions{})
	require.NoError(b, err)
	tn.kubelet(ns)

	start := func(cfg queue.Config) (string, func()) {
		cfg.NATS.URL, cfg.RESTConfig, cfg.Namespace = srv.ClientURL(), env.RESTConfig(), ns
		q := queuetest.Run(b, cfg)
		return q.Base, func() { assert.NoError(b, q.Stop()) }
	}
	onURL, stopOn := start(queue.Config{})
	defer stopOn()
	offURL, stopOff := start(queue.Config{InsecureDisableCallerAuth: true, DisableActivator: true})
	defer stopOff()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}, Timeout: 30 * time.Second}
	body := []byte(`{"mode":"sync","payload":{"prompt":"robot"}}`)
	call := func(base, tok string) error {
		req, _ := http.NewRequest("POST", base+"/v1/namespaces/"+ns+"/pools/echo/invocations", bytes.NewReader(body))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		r, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.StatusCode != 200 {
			return fmt.Errorf("status %d", r.StatusCode)
		}
		return nil
	}
	// Warm: a ready worker, RBAC settled, caches filled.
	require.Eventually(b, func() bool { return call(onURL, tr.Status.Token) == nil && call(offURL, "") == nil },
		90*time.Second, 200*time.Millisecond, "both ingresses answer")

	// One loop, calls alternating (and which goes first alternating too):
	// the path slows as the stream and the Records grow, so two
	// sub-benchmarks one after the other favoured whichever ran first.
	var off, on []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for k := range 2 {
			auth := (i+k)%2 == 0
			base, tok, lat := offURL, "", &off
			if auth {
				base, tok, lat = onURL, tr.Status.Token, &on
			}
			t0 := time.Now()
			if err := call(base, tok); err != nil {
				b.Fatal(err)
			}
			*lat = append(*lat, time.Since(t0))
		}
	}
	pct := func(lat []time.Duration, p int) time.Duration {
		slices.Sort(lat)
		return lat[min(len(lat)-1, len(lat)*p/100)]
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	p50off, p99off, p50on, p99on := pct(off, 50), pct(off, 99), pct(on, 50), pct(on, 99)
	b.ReportMetric(ms(p50off), "off-p50-ms")
	b.ReportMetric(ms(p99off), "off-p99-ms")
	b.ReportMetric(ms(p50on), "on-p50-ms")
	b.ReportMetric(ms(p99on), "on-p99-ms")
	b.ReportMetric(float64(p50on)/float64(p50off), "p50-on/off")
	b.ReportMetric(float64(p99on)/float64(p99off), "p99-on/off")
}
