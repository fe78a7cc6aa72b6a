// Package e2e tests the webhook against the real kube-apiserver of
// test/cluster: the API server calls the webhook over TLS at
// https://127.0.0.1:<port> through the webhook configurations Run keeps.
package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/scrape"
	"github.com/runplane/runplane/webhook"
	"github.com/runplane/runplane/webhook/config"
	"github.com/runplane/runplane/webhook/mutate"
)

var env *cluster.Cluster

func TestMain(m *testing.M) {
	// Run logs through the test's slog; controller-runtime's own start-up
	// lines are not needed.
	crlog.SetLogger(logr.Discard())
	cluster.Main(m, cluster.Options{Nodes: []cluster.Node{{Name: "gpu-0", GPUs: 8}}}, func(c *cluster.Cluster) { env = c })
}

const runplaneNS = api.DefaultNamespace

var setupOnce sync.Once

// setup creates what the chart would: runplane's namespace, the catalog and
// the PriorityClasses.
func setup(t *testing.T) kubernetes.Interface {
	t.Helper()
	c := env.Client()
	setupOnce.Do(func() {
		ctx := context.Background()
		if err := env.CreateNamespace(ctx, runplaneNS); !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
		_, err := c.CoreV1().ConfigMaps(runplaneNS).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: api.CatalogConfigMap},
			Data:       map[string]string{"g1.1": "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\n", draSpec: "cpu: \"8\"\nmemory: 32Gi\ndra: {}\n"},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		never := corev1.PreemptNever
		for _, pc := range []*schedulingv1.PriorityClass{
			{ObjectMeta: metav1.ObjectMeta{Name: api.PriorityClassWorkload}, Value: 1000},
			{ObjectMeta: metav1.ObjectMeta{Name: api.PriorityClassWorkloadHigh}, Value: 2000},
			{ObjectMeta: metav1.ObjectMeta{Name: api.PriorityClassStock}, Value: -100, PreemptionPolicy: &never},
		} {
			_, err := c.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{})
			require.NoError(t, err)
		}
	})
	return c
}

// running is a webhook started by a test.
type running struct {
	addr   string // 127.0.0.1:<port> of the admission listener
	health string // http://127.0.0.1:<port>
	stop   func()
	// scrapers read /metrics (the reader's token).
	scrapers scrape.Scrapers
}

// startWebhook runs webhook.Run in-process until the test ends, and waits
// until the API server calls it.
func startWebhook(t *testing.T, modify ...func(*webhook.Config)) *running {
	t.Helper()
	setup(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	counted := &countingListener{Listener: ln}
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	cfg := webhook.Config{
		RESTConfig:     env.RESTConfig(),
		Listener:       counted,
		HealthListener: hln,
		Logger:         slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	cfg.Namespace = runplaneNS
	cfg.Injection = mutate.Config{
		Image: "runplane:e2e", PauseImage: "registry.k8s.io/pause:3.10", NATSURL: "nats://127.0.0.1:4222",
		SubjectPrefix: api.DefaultSubjectPrefix, StreamName: api.DefaultStreamName,
		StockNamespaces: []string{stockNS}, Resources: mutate.DefaultSidecarResources(),
	}
	cfg.TLS.IPAddresses = []string{"127.0.0.1"}
	cfg.Webhooks = config.Webhooks{Manage: true, URL: "https://" + addr, Resync: metav1.Duration{Duration: 2 * time.Second}}
	for _, m := range modify {
		m(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan struct{})
	var runErr error // set before exited closes
	go func() { runErr = webhook.Run(ctx, cfg); close(exited) }()
	r := &running{addr: addr, health: "http://" + hln.Addr().String()}
	r.scrapers, err = scrape.New(t.Context(), env)
	require.NoError(t, err)
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			<-exited
			assert.NoError(t, runErr, "webhook.Run")
		})
	}
	t.Cleanup(r.stop)

	// Ready, and then the API server picks up the rewritten configuration
	// (new URL, new port) through its own watch: wait until a dry-run is
	// mutated by this instance.
	probeNS := env.Namespace(t, "webhook-probe")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		select {
		case <-exited:
			require.FailNow(c, "webhook.Run returned early", "%v", runErr)
		default:
		}
		require.Equal(c, http.StatusOK, status(r.health+"/readyz"), "ready")
		pod, err := env.Client().CoreV1().Pods(probeNS).Create(context.Background(), gpuPod("probe", "g1.1"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(c, err, "the API server calls the webhook")
		require.Equal(c, api.SchedulerName, pod.Spec.SchedulerName)
		require.Contains(c, r.metrics(c), `outcome="mutated"`)
	}, 60*time.Second, 200*time.Millisecond)
	// Served on the listener it was given, never closed and listened on
	// again: another process could take the port in between (it did, once,
	// to make dev).
	require.Positive(t, counted.accepted.Load(), "connections accepted on the given listener")
	return r
}

// countingListener counts the connections accepted on it.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func status(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// metrics is /metrics as the reader gets it.
func (r *running) metrics(t require.TestingT) string {
	code, body, err := scrape.Get("https://"+r.addr+"/metrics", r.scrapers.Reader)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, body)
	return body
}

func gpuPod(name, spec string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{api.LabelGPUSpec: spec}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "example.com/app:1"}}},
	}
}

// servedCert is the certificate the webhook presents right now.
func servedCert(t *testing.T, addr string) []byte {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) // only reading the certificate
	require.NoError(t, err)
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Raw
}

// servedProtocol is the application protocol the webhook's HTTPS
// listener agrees to with a client offering HTTP/2 and HTTP/1.1 (the API
// server's webhook client does).
func servedProtocol(t *testing.T, addr string) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}) // only reading the protocol
	require.NoError(t, err)
	defer conn.Close()
	return conn.ConnectionState().NegotiatedProtocol
}

func kubectl(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	return run(env.Binary("kubectl"), stdin, append([]string{"--kubeconfig", env.Kubeconfig()}, args...)...)
}

func run(bin, stdin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
