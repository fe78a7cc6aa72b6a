package kubetest_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/queuetest"
	"github.com/runplane/runplane/test/natsauth"
	"github.com/runplane/runplane/test/scrape"
)

// craftedNATSToken has the claims of a Pod-bound NATS token and a random
// signature: only a TokenReview can tell it is forged.
func craftedNATSToken(ns string) string {
	enc := base64.RawURLEncoding.EncodeToString
	claims := fmt.Sprintf(`{"aud":[%q],"exp":%d,"iss":"https://kubernetes.default.svc","sub":"system:serviceaccount:%s:worker",`+
		`"kubernetes.io":{"namespace":%q,"pod":{"name":"flood-%s","uid":%q},"serviceaccount":{"name":"worker","uid":"x"}}}`,
		api.NATSTokenAudience, time.Now().Add(time.Hour).Unix(), ns, ns, rand.Text()[:8], rand.Text())
	return enc([]byte(`{"alg":"RS256","kid":"x"}`)) + "." + enc([]byte(claims)) + "." + enc([]byte(rand.Text()+rand.Text()))
}

// TestFloodsDoNotStarveAdmission: while a flood of random bearer tokens
// hits the ingress and a flood of forged worker tokens hits the NATS auth
// callout, a worker with a fresh Pod-bound token still connects through
// the callout and a known caller still invokes. The flood having been
// answered many times is the barrier before the valid attempts.
func TestFloodsDoNotStarveAdmission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := "flood"
	require.NoError(t, env.CreateNamespace(ctx, ns))
	_, err := env.Client().RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "invoker"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{callerauth.Group}, Resources: []string{"pools/invocations"}, Verbs: []string{"create", "get"}}}},
		metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = env.Client().RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "client-invokes"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "invoker"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "client"}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	caller := saToken(t, ns, "client")
	_, err = env.Client().CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "worker"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	dep := deployment(ns, "workers", "echo", 1)
	dep.Spec.Template.Spec.ServiceAccountName = "worker"
	_, err = env.Client().AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{})
	require.NoError(t, err)
	var pod corev1.Pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods, err := env.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelPool + "=echo"})
		require.NoError(c, err)
		require.Len(c, pods.Items, 1)
		pod = pods.Items[0]
	}, 60*time.Second, 100*time.Millisecond, "the pool's Pod")

	srv, auth := queuetest.CalloutNATS(t, natsauth.Extra{})
	// The client-side limits of an in-cluster config (rest.InClusterConfig
	// leaves client-go's defaults, 5 QPS, burst 10), not the harness's 500.
	rc := rest.CopyConfig(env.RESTConfig())
	rc.QPS, rc.Burst = 5, 10
	scrapers, err := scrape.New(ctx, env)
	require.NoError(t, err)
	q := queuetest.Run(t, queue.Config{NATS: queue.NATS{URL: srv.ClientURL(), TrustFile: auth.TrustFile, Client: auth.Client},
		MetricsListen: "127.0.0.1:0", RESTConfig: rc, Namespace: ns, Tick: 100 * time.Millisecond})
	base, metricsURL := q.Base, q.MetricsURL
	invoke := "/v1/namespaces/" + ns + "/pools/echo/invocations"
	// The known caller: authenticated and authorized before the flood.
	require.Eventually(t, func() bool {
		code, _ := call(base, caller, "POST", invoke, map[string]any{"mode": "async"})
		return code == http.StatusAccepted
	}, 60*time.Second, 200*time.Millisecond, "the caller invokes before the flood")
	require.Eventually(t, func() bool {
		subs, err := srv.Subsz(&server.SubszOptions{Subscriptions: true, Test: "$SYS.REQ.USER.AUTH", Account: auth.Trust.Runplane.Pub})
		return err == nil && subs.Total > 0
	}, 30*time.Second, 50*time.Millisecond, "the queue's callout")

	// The floods, until the test ends.
	fctx, stopFlood := context.WithCancel(ctx)
	var flood sync.WaitGroup
	defer func() { stopFlood(); flood.Wait() }()
	var httpAnswered, natsRefused, retryAfter atomic.Int64
	client := &http.Client{Timeout: 30 * time.Second}
	for range 16 {
		flood.Add(1)
		go func() {
			defer flood.Done()
			for fctx.Err() == nil {
				req, _ := http.NewRequestWithContext(fctx, "POST", base+invoke, strings.NewReader(`{"mode":"async"}`))
				req.Header.Set("Authorization", "Bearer "+rand.Text())
				if r, err := client.Do(req); err == nil {
					if r.StatusCode == http.StatusTooManyRequests && r.Header.Get("Retry-After") == "1" {
						retryAfter.Add(1)
					}
					_, _ = io.Copy(io.Discard, r.Body)
					r.Body.Close()
					httpAnswered.Add(1)
				}
				time.Sleep(10 * time.Millisecond) // a shared test machine
			}
		}()
	}
	for range 8 {
		flood.Add(1)
		go func() {
			defer flood.Done()
			for fctx.Err() == nil {
				// From one address (one hostile Pod); the worker below
				// connects from another.
				nc, err := nats.Connect(srv.ClientURL(), auth.TLSOption(), nats.Token(craftedNATSToken(ns)), nats.NoReconnect(), nats.Timeout(10*time.Second),
					nats.SetCustomDialer(&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}))
				if err != nil {
					natsRefused.Add(1)
				} else {
					nc.Close()
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	require.Eventually(t, func() bool { return httpAnswered.Load() >= 20 && natsRefused.Load() >= 5 },
		90*time.Second, 50*time.Millisecond, "the floods are running")

	// A fresh Pod-bound token: nothing cached, the callout must review it.
	tr, err := env.Client().CoreV1().ServiceAccounts(ns).CreateToken(ctx, "worker", &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{api.NATSTokenAudience}, ExpirationSeconds: ptr.To[int64](600),
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	floodBefore := natsRefused.Load()
	// A sidecar retries a refused connect; three tries, each the server's
	// full auth timeout, while the flood goes on.
	var worker *nats.Conn
	connectStart := time.Now()
	for range 3 {
		if worker, err = nats.Connect(srv.ClientURL(), auth.TLSOption(), nats.Token(tr.Status.Token), nats.NoReconnect(), nats.Timeout(10*time.Second)); err == nil {
			break
		}
	}
	require.NoError(t, err, "the worker connects through the callout during the flood")
	connected := time.Since(connectStart)
	worker.Close()
	invokeStart := time.Now()
	code, body := call(base, caller, "POST", invoke, map[string]any{"mode": "async"})
	t.Logf("during the flood (%d ingress answers, %d refused connects so far): worker connected in %s, caller invoked in %s",
		httpAnswered.Load(), natsRefused.Load(), connected, time.Since(invokeStart))
	assert.Equal(t, http.StatusAccepted, code, "the known caller invokes during the flood: %s", body)
	assert.Greater(t, natsRefused.Load(), floodBefore, "the callout flood was still running")

	assert.Positive(t, retryAfter.Load(), "unknown tokens beyond the review budget get 429 with Retry-After")
	// The limits showed up in the metrics.
	code, metrics, err := scrape.Get(metricsURL, scrapers.Reader)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, metrics)
	assert.Contains(t, metrics, `runplane_caller_auth_rate_limited_total{review="token"}`)
	assert.Contains(t, metrics, `runplane_nats_callout_answers_total{reason="invalid_token",result="refused"}`)
	assert.Contains(t, metrics, `runplane_nats_callout_answers_total{reason="rate_limited",result="refused"}`)
}
