package rbac_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/bootstrapsecret"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/natsaccounts"
	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/internal/pki"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/activator"
	"github.com/runplane/runplane/queue/callback"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/sidecar/sidecartest"
	"github.com/runplane/runplane/test/e2e/rbac"
	"github.com/runplane/runplane/test/natsauth"
	"github.com/runplane/runplane/test/scrape"
)

// TestQueue: as runplane-queue (all namespaces, as the chart runs it), the
// queue learns a pool from its Deployment, holds the activator Lease,
// scales the pool from zero through the scale subresource when an
// invocation arrives, and, once the worker is idle, marks its Pod with a
// low pod-deletion-cost and scales back to zero. It dials an embedded NATS
// that includes the trust.conf of the trust Secret the queue created, as
// the chart's bundled NATS does (operator mode: the queue's users derived
// from the Secret's secret; everyone else through the queue's auth
// callout), and a worker's Pod-bound token connects through the callout,
// which reviews it, follows its Pod to the pool's Deployment as
// runplane-queue and places it in an account of its own.
func TestQueue(t *testing.T) {
	install(t)
	rec := &rbac.Recorder{}
	t.Cleanup(func() { checkNoDenials(t, "runplane-queue", rec) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := env.Client()
	ns, pool := queueNS, "echo"

	// The configuration the chart renders (queue/_config.tpl): no
	// watchNamespace (all namespaces), leader election in the release
	// namespace, the NATS trust Secret and the resolver dir.
	qc := chartQueueConfig(t)
	boot := qc.NATS.Bootstrap
	// The chart renders no key material: the queue creates the trust Secret
	// at start (nats.bootstrap.trustSecret), as its own ServiceAccount,
	// as cmd/runplane-queue's bootstrap does.
	queueClient := as(t, "runplane-queue")
	resolverDir := boot.ResolverDir
	trust, err := bootstrapsecret.Ensure(ctx, queueClient, qc.Namespace, boot.TrustSecret, nil,
		bootstrapsecret.NATSTrust(resolverDir, queue.WorkerExports(stream.Config{})), bootstrapsecret.TrustSecretKey, bootstrapsecret.TrustConfigKey)
	require.NoError(t, err, "the queue creating the NATS trust Secret")
	// Callbacks on, as the chart has them: the master key is also the
	// queue's to create. Every invocation makes it read the namespace's
	// UID (get namespaces, callbacks on or off), which stamps the Record
	// and which the callback's key follows.
	cbKey, err := bootstrapsecret.Ensure(ctx, queueClient, qc.Namespace, qc.Callbacks.SigningSecret, nil, func() (map[string][]byte, error) {
		return map[string][]byte{"key": []byte(hex.EncodeToString(make([]byte, 32)))}, nil
	}, "key")
	require.NoError(t, err, "the queue creating the callbacks' signing key")
	master, err := hex.DecodeString(string(cbKey["key"]))
	require.NoError(t, err)
	namespaceWorkers := qc.Callbacks.NamespaceWorkers
	hooks := make(chan *http.Request, 1)
	hookBodies := make(chan []byte, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case hooks <- r:
			hookBodies <- b
		default:
		}
	}))
	t.Cleanup(hook.Close)
	dir := t.TempDir()
	// The queue's copy of the secret (its -bootstrap-dir).
	trustFile := filepath.Join(dir, bootstrapsecret.TrustSecretKey)
	require.NoError(t, os.WriteFile(trustFile, trust[bootstrapsecret.TrustSecretKey], 0o600))
	// The NATS CA and certificate for the chart's names, created and kept
	// by the queue as its ServiceAccount (its -nats-tls-secret), the CA
	// bundle published for the webhook.
	recClient, err := kubernetes.NewForConfig(rec.As(env.RESTConfig(), releaseNS, "runplane-queue"))
	require.NoError(t, err)
	keeper := &natstls.Keeper{Client: recClient, Secret: pki.SecretRef{Namespace: qc.Namespace, Name: boot.TLSSecret},
		Cert:   pki.Options{Name: "runplane-nats", DNSNames: boot.TLSDNSNames},
		CAFile: filepath.Join(dir, "nats-ca.crt"), Interval: 500 * time.Millisecond, Wait: 300 * time.Millisecond}
	_, err = keeper.Ensure(ctx)
	require.NoError(t, err, "the queue creating the NATS TLS Secret and publishing its CA")
	natsTLS := natstls.Client{CAFile: keeper.CAFile, ServerName: qc.NATS.ServerName}
	tlsOpts, err := natsTLS.Options()
	require.NoError(t, err)
	srv, mountTLS := startTrustedNATS(t, dir, resolverDir, trust[bootstrapsecret.TrustConfigKey], keeper.Secret)
	tr, err := natsaccounts.Derive(trust[bootstrapsecret.TrustSecretKey])
	require.NoError(t, err)
	queueJWT, queueSeed, err := tr.QueueCreds()
	require.NoError(t, err)
	served := func() []byte {
		c, err := nats.Connect(srv.ClientURL(), append(tlsOpts, nats.UserJWTAndSeed(queueJWT, string(queueSeed)), nats.NoReconnect())...)
		require.NoError(t, err)
		defer c.Close()
		st, err := c.TLSConnectionState()
		require.NoError(t, err)
		return st.PeerCertificates[0].Raw
	}
	// Renewed (update, as runplane-queue): the servers still mount the
	// first certificate until the kubelet catches up (mountTLS, below);
	// the queue's keeper has them reload it then.
	first := served()
	keeper.Cert.RenewBefore = 2 * 365 * 24 * time.Hour
	_, err = keeper.Ensure(ctx)
	require.NoError(t, err, "the queue renewing the NATS certificate")
	keeper.Cert.RenewBefore = 0

	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Labels: map[string]string{api.LabelPool: pool},
			Annotations: map[string]string{api.AnnotationIdleTimeout: "1s"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{api.LabelPool: pool}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{api.LabelPool: pool}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "framework", Image: "framework"}},
					TerminationGracePeriodSeconds: ptr.To[int64](0)},
			},
		},
	}
	_, err = client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
	require.NoError(t, err)
	marked := make(chan string, 1)
	kubelet(t, srv.ClientURL(), natsTLS, ns, pool, marked)

	cfg := queue.Config{
		NATS: queue.NATS{URL: srv.ClientURL(), TrustFile: trustFile, Client: natsTLS}, NATSTLSKeeper: keeper, Listen: "127.0.0.1:0", InsecureDisableCallerAuth: true,
		RESTConfig:     rec.As(env.RESTConfig(), releaseNS, "runplane-queue"),
		Namespace:      qc.WatchNamespace,
		LeaderElection: qc.LeaderElection, LeaseNamespace: qc.Namespace, Identity: "rbac-test",
		Decisions: activator.Decisions{Workers: activator.Workers{HeartbeatTimeout: metav1.Duration{Duration: 2 * time.Second}}}, Tick: 100 * time.Millisecond, Logger: rec.Logger(),
		Callbacks: callback.Config{MasterKey: master, Delivery: callback.Delivery{AllowCIDRs: []string{"127.0.0.0/8"}, NamespaceWorkers: namespaceWorkers}},
	}
	addr, metricsAddr := make(chan string, 1), make(chan string, 1)
	cfg.OnListen = func(a string) { addr <- a }
	cfg.MetricsListen, cfg.OnMetricsListen = "127.0.0.1:0", func(a string) { metricsAddr <- a }
	chartCfg, err := qc.Queue()
	require.NoError(t, err)
	cfg.MetricsCert = chartCfg.MetricsCert
	qctx, qcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- queue.Run(qctx, cfg) }()
	t.Cleanup(func() {
		qcancel()
		assert.NoError(t, <-done, "queue.Run")
	})
	var base, metricsURL string
	for base == "" || metricsURL == "" {
		select {
		case a := <-addr:
			base = "http://" + a
		case a := <-metricsAddr:
			metricsURL = "https://" + a + "/metrics"
		case err := <-done:
			require.Failf(t, "queue.Run ended before listening", "%v", err)
		case <-ctx.Done():
			require.Fail(t, "the queue did not listen")
		}
	}
	// /metrics: the queue reviews scrapers as its chart ServiceAccount, and
	// the chart's runplane-metrics-reader lets one in.
	scrapers, err := scrape.New(ctx, env)
	require.NoError(t, err)
	scrapers.Check(t, metricsURL, "runplane_build_info")
	checkVerified(ctx, t, scrapers, metricsURL, cfg.MetricsCert)
	replicas := func() int32 {
		d, err := client.AppsV1().Deployments(ns).Get(ctx, "workers", metav1.GetOptions{})
		if err != nil {
			return -1
		}
		return *d.Spec.Replicas
	}

	mountTLS()
	eventually(t, rec, 30*time.Second, "the renewed certificate served, the server reloaded by the queue", func() (bool, error) {
		return !bytes.Equal(served(), first), nil
	})
	eventually(t, rec, 30*time.Second, "the pool known from its Deployment", func() (bool, error) {
		r, err := http.Get(base + "/v1/namespaces/" + ns + "/pools/" + pool)
		if err != nil {
			return false, err
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK, nil
	})
	eventually(t, rec, 30*time.Second, "the activator Lease held", func() (bool, error) {
		l, err := client.CoordinationV1().Leases(releaseNS).Get(ctx, "runplane-queue-activator", metav1.GetOptions{})
		return err == nil && ptr.Deref(l.Spec.HolderIdentity, "") == "rbac-test", err
	})
	body, _ := json.Marshal(map[string]any{"mode": "async", "invocationID": "rbac-1", "ttlSeconds": 120, "callbackURL": hook.URL})
	r, err := http.Post(base+"/v1/namespaces/"+ns+"/pools/"+pool+"/invocations", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	r.Body.Close()
	require.Equal(t, http.StatusAccepted, r.StatusCode, "invoke")
	eventually(t, rec, 30*time.Second, "scale from zero", func() (bool, error) { return replicas() == 1, nil })
	var worker *corev1.Pod
	eventually(t, rec, 30*time.Second, "the worker Pod", func() (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelPool + "=" + pool})
		if err != nil || len(pods.Items) == 0 {
			return false, err
		}
		worker = &pods.Items[0]
		return true, nil
	})
	tok, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, worker.Spec.ServiceAccountName, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{api.NATSTokenAudience}, ExpirationSeconds: ptr.To[int64](600),
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: worker.Name, UID: worker.UID},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
	wc, err := nats.Connect(srv.ClientURL(), append(tlsOpts, nats.Token(tok.Status.Token), nats.NoReconnect(), nats.Timeout(10*time.Second))...)
	require.NoError(t, err, "the worker's Pod-bound token through the queue's callout")
	wc.Close()
	eventually(t, rec, 30*time.Second, "the invocation to succeed", func() (bool, error) {
		r, err := http.Get(base + "/v1/namespaces/" + ns + "/invocations/rbac-1")
		if err != nil {
			return false, err
		}
		defer r.Body.Close()
		var rec messages.Record
		if err := json.NewDecoder(r.Body).Decode(&rec); err != nil {
			return false, err
		}
		return rec.State == messages.StateSucceeded, nil
	})
	select {
	case hr := <-hooks:
		kr, err := http.Get(base + "/v1/namespaces/" + ns + "/callback-signing-key")
		require.NoError(t, err)
		defer kr.Body.Close()
		require.Equal(t, http.StatusOK, kr.StatusCode, "the namespace's key (its UID read as runplane-queue)")
		var key struct{ Key, KeyID string }
		require.NoError(t, json.NewDecoder(kr.Body).Decode(&key))
		nsObj, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, callback.KeyID(string(nsObj.UID)), key.KeyID, "the ID of the key of the namespace's UID")
		k, err := hex.DecodeString(key.Key)
		require.NoError(t, err)
		require.NoError(t, callback.Verify(k, hr.Header.Get(callback.SignatureHeader), <-hookBodies, time.Now(), 5*time.Minute),
			"the callback is signed with the namespace's key")
	case <-ctx.Done():
		require.Fail(t, "no completion callback")
	}
	eventually(t, rec, 30*time.Second, "idle scale-down to zero", func() (bool, error) { return replicas() == 0, nil })
	select {
	case name := <-marked:
		t.Logf("pod %s got %s before it went", name, activator.PodDeletionCost)
	case <-time.After(10 * time.Second):
		require.Failf(t, "no deletion cost", "no pool Pod got %s", activator.PodDeletionCost)
	}
}

// startTrustedNATS runs an embedded nats-server whose configuration, like
// the chart's (templates/_nats.tpl), includes the trust Secret's
// trust.conf as it is, but for its resolver dir (the chart's, on the NATS
// PVC), moved into dir, and serves TLS first with the TLS Secret's
// certificate. mount writes the Secret's files again, as the kubelet
// updates the chart's volume.
func startTrustedNATS(t *testing.T, dir, resolverDir string, trustConf []byte, tlsSecret pki.SecretRef) (srv *server.Server, mount func()) {
	t.Helper()
	quoted := strconv.Quote(resolverDir)
	require.Equal(t, 1, bytes.Count(trustConf, []byte(quoted)), "trust.conf names the resolver dir %s once:\n%s", quoted, trustConf)
	trustConf = bytes.Replace(trustConf, []byte(quoted), []byte(strconv.Quote(filepath.Join(dir, "jwt"))), 1)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "trust"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "trust", "trust.conf"), trustConf, 0o600))
	files := natstls.ServerFiles{Cert: filepath.Join(dir, "tls", "tls.crt"), Key: filepath.Join(dir, "tls", "tls.key"), CA: filepath.Join(dir, "tls", pki.KeyCABundle)}
	require.NoError(t, os.Mkdir(filepath.Join(dir, "tls"), 0o700))
	mount = func() {
		s, err := env.Client().CoreV1().Secrets(tlsSecret.Namespace).Get(t.Context(), tlsSecret.Name, metav1.GetOptions{})
		require.NoError(t, err)
		for f, k := range map[string]string{files.Cert: corev1.TLSCertKey, files.Key: corev1.TLSPrivateKeyKey, files.CA: pki.KeyCABundle} {
			require.NoError(t, os.WriteFile(f, s.Data[k], 0o600))
		}
	}
	mount()
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, "listen: \"127.0.0.1:-1\"\njetstream { store_dir: %q }\nauthorization { timeout: 10 }\ninclude \"trust/trust.conf\"\n%s",
		filepath.Join(dir, "js"), natstls.ServerConfig(files)), 0o600))
	return natsauth.FromConfig(t, conf), mount
}

// kubelet runs the real sidecar of every Running Pod of the pool, until
// the test ends: its credential the Pod's bound token, through the queue's
// callout, as in a worker Pod. It reports the first Pod it sees with the
// activator's pod-deletion-cost on marked.
func kubelet(t *testing.T, natsURL string, natsTLS natstls.Client, ns, pool string, marked chan<- string) {
	dir := t.TempDir()
	k := &sidecartest.Kubelet{Client: env.Client(), Namespace: ns, Selector: api.LabelPool + "=" + pool,
		Config: func(pod *corev1.Pod) (sidecartest.Config, error) {
			tok, err := env.Client().CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), pod.Spec.ServiceAccountName, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
				Audiences: []string{api.NATSTokenAudience}, ExpirationSeconds: ptr.To[int64](600),
				BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
			}}, metav1.CreateOptions{})
			if err != nil {
				return sidecartest.Config{}, fmt.Errorf("the Pod's NATS token: %w", err)
			}
			file := filepath.Join(dir, pod.Name+".token")
			if err := os.WriteFile(file, []byte(tok.Status.Token), 0o600); err != nil {
				return sidecartest.Config{}, err
			}
			return sidecartest.Config{NATSURL: natsURL, TLS: natsTLS, TokenFile: file, JSAPIPrefix: api.WorkerJSAPIPrefix,
				Namespace: ns, Pool: pool, Heartbeat: 200 * time.Millisecond}, nil
		},
		OnPod: func(pod *corev1.Pod) {
			if pod.Annotations[activator.PodDeletionCost] != "" {
				select {
				case marked <- pod.Name:
				default:
				}
			}
		},
		OnError: func(err error) { t.Log(err) }}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); k.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
}
