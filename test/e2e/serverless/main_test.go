// Package serverless is the end-to-end test of the serverless path on the
// local control plane: webhook (injects the sidecar), queue (ingress +
// activator, scaling the pool's Deployment) and local workers (each kwok
// Pod of a pool runs runplane-sidecar + framework-echo as processes).
package serverless

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/internal/pki"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/localworkers"
	"github.com/runplane/runplane/webhook"
	"github.com/runplane/runplane/webhook/mutate"

	"github.com/stretchr/testify/assert"
)

const ns = "e2e"

// stack is everything the tests talk to.
type stack struct {
	cluster *cluster.Cluster
	nats    *server.Server
	// natsTLS is how clients verify nats: zero (no TLS) unless
	// RUNPLANE_E2E_NATS_TLS is set (benchmarks compare).
	natsTLS  natstls.Client
	nc       *nats.Conn
	queueURL string
	workers  *localworkers.Runner
}

var st *stack

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	// RUNPLANE_E2E_DIR keeps the cluster's dir (component and worker logs).
	c, err := cluster.Start(ctx, cluster.Options{Nodes: []cluster.Node{{Name: "node-0", Pods: 200}}, Logf: logf, Dir: os.Getenv("RUNPLANE_E2E_DIR")})
	if err != nil {
		logf("cluster: %v", err)
		return 1
	}
	defer c.Stop()
	runCtx, stopStack := context.WithCancel(ctx)
	var wg sync.WaitGroup
	s, err := start(runCtx, c, &wg)
	if err != nil {
		logf("e2e stack: %v", err)
		stopStack()
		wg.Wait()
		return 1
	}
	st = s
	code := m.Run()
	if code != 0 {
		c.DumpLogs(logf, 40)
		if b, err := os.ReadFile(filepath.Join(c.Dir(), "components.log")); err == nil {
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			logf("--- components.log (webhook, queue, local workers), last 80 lines:\n%s", strings.Join(lines[max(0, len(lines)-80):], "\n"))
		}
		logf("local worker logs: %s (set RUNPLANE_E2E_DIR to keep them)", filepath.Join(c.Dir(), "workers"))
	}
	stopStack()
	s.workers.Wait()
	wg.Wait()
	s.nc.Close()
	s.nats.Shutdown()
	return code
}

func start(ctx context.Context, c *cluster.Cluster, wg *sync.WaitGroup) (*stack, error) {
	s := &stack{cluster: c}
	var err error
	o := &server.Options{JetStream: true, StoreDir: filepath.Join(c.Dir(), "nats"), Host: "127.0.0.1", Port: -1}
	// RUNPLANE_E2E_NATS_TLS: NATS serves verified TLS first, as the chart's
	// does; every client (queue, sidecars, the tests) verifies it.
	if os.Getenv("RUNPLANE_E2E_NATS_TLS") != "" {
		b, err := pki.Renew(nil, pki.Options{Name: "e2e-nats", DNSNames: []string{"nats.e2e"}})
		if err != nil {
			return nil, err
		}
		cert, err := b.TLSCertificate()
		if err != nil {
			return nil, err
		}
		o.TLSConfig, o.TLSHandshakeFirst = &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}, true
		s.natsTLS = natstls.Client{CA: b.CABundle, ServerName: "nats.e2e"}
	}
	s.nats, err = server.NewServer(o)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	s.nats.Start()
	if !s.nats.ReadyForConnections(10 * time.Second) {
		return nil, fmt.Errorf("nats not ready")
	}
	if s.nc, err = s.connect(); err != nil {
		return nil, err
	}
	for _, n := range []string{api.DefaultNamespace, ns} {
		if err := c.CreateNamespace(ctx, n); err != nil {
			return nil, err
		}
	}
	if s.natsTLS.Enabled() {
		if err := natstls.PublishCA(ctx, c.Client(), api.DefaultNamespace, s.natsTLS.CA, nil); err != nil {
			return nil, err
		}
	}
	// The whole serverless flow runs where Pod Security "restricted" is
	// enforced and a compute ResourceQuota applies (restricted_test.go).
	if err := restrictNamespace(ctx, c, ns); err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(logFile(c, "components.log"), &slog.HandlerOptions{Level: slog.LevelInfo}))
	errc := make(chan error, 3)
	goRun := func(name string, fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(); err != nil && ctx.Err() == nil {
				log.Error(name+" stopped", "err", err)
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}

	// Webhook, registered by URL on loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	inj := mutate.DefaultConfig()
	inj.Image, inj.NATSURL, inj.NATSServerName = "runplane:e2e", "nats://nats.runplane-system:4222", s.natsTLS.ServerName
	goRun("webhook", func() error {
		return webhook.Run(ctx, webhook.Config{
			RESTConfig: c.RESTConfig(), Listener: ln, HealthAddr: "0", Injection: inj, Logger: log,
			TLS:      webhook.TLSConfig{IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}},
			Webhooks: webhook.WebhooksConfig{Manage: true, URL: "https://" + ln.Addr().String(), Resync: 5 * time.Second},
		})
	})

	// Queue: ingress + activator, scaling Deployments in ns.
	addr := make(chan string, 1)
	goRun("queue", func() error {
		return queue.Run(ctx, queue.Config{
			NATSURL: s.nats.ClientURL(), NATSTLS: s.natsTLS, InsecureDisableCallerAuth: true, Listen: "127.0.0.1:0", OnListen: func(a string) { addr <- a },
			RESTConfig: c.RESTConfig(), Namespace: ns, HeartbeatTimeout: 4 * time.Second, Backoff: 200 * time.Millisecond,
			Tick: 200 * time.Millisecond, Logger: log,
		})
	})
	select {
	case a := <-addr:
		s.queueURL = "http://" + a
	case err := <-errc:
		return nil, err
	case <-time.After(2 * time.Minute):
		return nil, fmt.Errorf("queue did not listen")
	}

	bin := filepath.Join(c.Dir(), "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	scBin, fwBin, err := localworkers.BuildBinaries(ctx, bin)
	if err != nil {
		return nil, err
	}
	s.workers, err = localworkers.Start(ctx, localworkers.Config{
		Client: c.Client(), NATSURL: s.nats.ClientURL(), SidecarBinary: scBin, FrameworkBinary: fwBin,
		// This NATS has no auth callout to create the workers' consumers,
		// and no accounts.
		PlainJetStream: true,
		SidecarArgs:    []string{"-create-consumer", "-heartbeat-interval", "1s", "-probe-interval", "100ms", "-fetch-wait", "500ms", "-shutdown-grace", "10s", "-ack-wait", "3s"},
		Namespace:      ns, Dir: filepath.Join(c.Dir(), "workers"), StopGrace: 15 * time.Second,
		Logf: func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) },
	})
	if err != nil {
		return nil, err
	}

	// Ready when a pool Pod is mutated (the webhook serves and is trusted)
	// and the ingress answers /readyz.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-errc:
			return false, err
		default:
		}
		return webhookInjects(ctx, c) && httpOK(s.queueURL+"/readyz"), nil
	})
	if err != nil {
		return nil, fmt.Errorf("webhook or queue not ready (see %s): %w", filepath.Join(c.Dir(), "components.log"), err)
	}
	return s, nil
}

// connect is a new connection to the stack's NATS.
func (s *stack) connect(opts ...nats.Option) (*nats.Conn, error) {
	tlsOpts, err := s.natsTLS.Options()
	if err != nil {
		return nil, err
	}
	return nats.Connect(s.nats.ClientURL(), append(tlsOpts, opts...)...)
}

func logFile(c *cluster.Cluster, name string) io.Writer {
	f, err := os.Create(filepath.Join(c.Dir(), name))
	if err != nil {
		return os.Stderr
	}
	return f
}

func webhookInjects(ctx context.Context, c *cluster.Cluster) bool {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns, Labels: map[string]string{api.LabelPool: "probe"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{restrictedContainer("app", "x")}}}
	got, err := c.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return false
	}
	for _, ic := range got.Spec.InitContainers {
		if ic.Name == api.SidecarContainerName {
			return true
		}
	}
	return false
}

func httpOK(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// pool creates a pool Deployment running framework-echo.
func pool(t testing.TB, name string, replicas int32, concurrency int, ann map[string]string) {
	t.Helper()
	labels := map[string]string{api.LabelPool: name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: ann},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{api.AnnotationConcurrency: strconv.Itoa(concurrency)}},
				Spec: corev1.PodSpec{
					Containers:                    []corev1.Container{restrictedContainer("framework", "framework-echo:e2e")},
					TerminationGracePeriodSeconds: ptr.To[int64](0),
				},
			},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := st.cluster.Client().AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
	require.NoError(t, err, "create pool %s", name)
	t.Cleanup(func() {
		_ = st.cluster.Client().AppsV1().Deployments(ns).Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	})
	// Let the queue learn the pool before invoking it.
	require.Eventually(t, func() bool { return httpOK(st.queueURL + "/v1/namespaces/" + ns + "/pools/" + name) }, 30*time.Second, 100*time.Millisecond,
		"queue does not know pool %s", name)
}

// invoke posts an invocation and decodes the JSON answer into out.
func invoke(t testing.TB, poolName string, body map[string]any, out any) int {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(st.queueURL+"/v1/namespaces/"+ns+"/pools/"+poolName+"/invocations", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Errorf("invoke %s: %v", poolName, err)
		return 0
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		err := json.Unmarshal(data, out)
		assert.NoError(t, err, "invoke %s: HTTP %d, body %s: %v", poolName, resp.StatusCode, data, err)
	}
	return resp.StatusCode
}

func getJSON(t *testing.T, url string, out any) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err, "GET %s: %v", url, err)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	require.NoError(t, json.Unmarshal(data, out), "GET %s: HTTP %d %s", url, resp.StatusCode, data, err)
	return resp.StatusCode
}

func replicas(t *testing.T, name string) int32 {
	t.Helper()
	sc, err := st.cluster.Client().AppsV1().Deployments(ns).GetScale(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err, "scale of %s: %v", name, err)
	return sc.Spec.Replicas
}

func poolPods(t *testing.T, name string) []corev1.Pod {
	t.Helper()
	l, err := st.cluster.Client().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: api.LabelPool + "=" + name})
	require.NoError(t, err)
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}
