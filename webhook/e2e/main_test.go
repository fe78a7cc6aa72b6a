// Package e2e tests the webhook against the real kube-apiserver of
// test/cluster: the API server calls the webhook over TLS at
// https://127.0.0.1:<port> through the webhook configurations Run keeps.
package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/webhook"
	"github.com/runplane/runplane/webhook/mutate"
)

var env *cluster.Cluster

func TestMain(m *testing.M) {
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
		if err := env.CreateNamespace(ctx, runplaneNS); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		_, err := c.CoreV1().ConfigMaps(runplaneNS).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: api.CatalogConfigMap},
			Data:       map[string]string{"g1.1": "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\n"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		never := corev1.PreemptNever
		for _, pc := range []*schedulingv1.PriorityClass{
			{ObjectMeta: metav1.ObjectMeta{Name: api.PriorityClassWorkload}, Value: 1000},
			{ObjectMeta: metav1.ObjectMeta{Name: api.PriorityClassStock}, Value: -100, PreemptionPolicy: &never},
		} {
			if _, err := c.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	})
	return c
}

func namespace(t *testing.T, name string) string {
	t.Helper()
	if err := env.CreateNamespace(context.Background(), name); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

// running is a webhook started by a test.
type running struct {
	addr   string // 127.0.0.1:<port> of the admission listener
	health string // http://127.0.0.1:<port>
	stop   func()
}

// startWebhook runs webhook.Run in-process until the test ends, and waits
// until the API server calls it.
func startWebhook(t *testing.T, modify ...func(*webhook.Config)) *running {
	t.Helper()
	setup(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := webhook.Config{
		RESTConfig:     env.RESTConfig(),
		Namespace:      runplaneNS,
		Listener:       ln,
		HealthListener: hln,
		Injection: mutate.Config{
			Image: "runplane:e2e", PauseImage: "registry.k8s.io/pause:3.10", NATSURL: "nats://127.0.0.1:4222",
			SubjectPrefix: api.DefaultSubjectPrefix, StreamName: api.DefaultStreamName,
		},
		TLS:      webhook.TLSConfig{IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, CheckInterval: time.Hour},
		Webhooks: webhook.WebhooksConfig{Manage: true, URL: "https://" + ln.Addr().String(), Resync: 2 * time.Second},
		Logger:   slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	for _, m := range modify {
		m(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- webhook.Run(ctx, cfg) }()
	r := &running{addr: ln.Addr().String(), health: "http://" + hln.Addr().String()}
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("webhook.Run: %v", err)
			}
		})
	}
	t.Cleanup(r.stop)

	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-done:
			t.Fatalf("webhook.Run returned early: %v", err)
		default:
		}
		if status(r.health+"/readyz") == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("webhook never ready")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The API server picks up the rewritten configuration (new URL, new
	// port) through its own watch: wait until a dry-run is mutated by this
	// instance.
	probeNS := namespace(t, "webhook-probe")
	for {
		pod, err := env.Client().CoreV1().Pods(probeNS).Create(context.Background(), gpuPod("probe", "g1.1"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && pod.Spec.SchedulerName == api.SchedulerName && strings.Contains(scrape(t, r.health), `outcome="mutated"`) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API server never called the webhook: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
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

func scrape(t *testing.T, health string) string {
	t.Helper()
	resp, err := http.Get(health + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
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
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Raw
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
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
