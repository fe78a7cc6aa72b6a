package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/metricsauth"
	"github.com/runplane/runplane/test/scrape"
)

// devComponents are the components whose /metrics make dev serves.
var devComponents = []string{"controller", "extender", "queue", "webhook"}

// kubeClient is make dev's cluster as test/scrape needs it.
type kubeClient struct{ kubernetes.Interface }

func (k kubeClient) Client() kubernetes.Interface { return k.Interface }

// TestMakeDev runs the make dev program as a user would: it must print the
// kubeconfig and queue URL lines, serve Ready GPU nodes, answer a sync
// invocation through a pool that starts at zero, and on SIGINT exit 0
// leaving no process behind.
func TestMakeDev(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole local system")
	}
	bin := filepath.Join(t.TempDir(), "runplane-dev")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "building:\n%s", out)
	dir := t.TempDir()
	// The real node is proven by test/e2e/realnode; make dev's own test keeps to kwok.
	cmd := exec.Command(bin, "-dir", dir, "-nodes", "2", "-real-nodes", "0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var output bytes.Buffer
	cmd.Stderr = &output
	began := time.Now()
	require.NoError(t, cmd.Start())
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var kubeconfig, queueURL, demoToken string
	metrics := map[string]string{}
	timeout := time.After(3 * time.Minute)
	for kubeconfig == "" || queueURL == "" || demoToken == "" || len(metrics) < len(devComponents) {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "make dev exited early:\n%s", output.String())
			output.WriteString(line + "\n")
			if v, ok := strings.CutPrefix(line, "kubeconfig: "); ok {
				kubeconfig = v
			}
			if v, ok := strings.CutPrefix(line, "queue ingress URL: "); ok {
				queueURL = v
			}
			if v, ok := strings.CutPrefix(line, "demo token: "); ok {
				demoToken = v
			}
			if v, ok := strings.CutPrefix(line, "metrics: "); ok {
				name, url, _ := strings.Cut(v, " ")
				metrics[name] = url
			}
		case <-timeout:
			t.Fatalf("no kubeconfig and queue URL lines within 3 minutes:\n%s", output.String())
		}
	}
	t.Logf("make dev serving after %s", time.Since(began).Round(100*time.Millisecond))
	go func() {
		for line := range lines {
			output.WriteString(line + "\n")
		}
	}()

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	ready := 0
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	assert.EqualValues(t, 2, ready, "%d Ready nodes, want 2", ready)

	body := `{"mode":"sync","payload":{"prompt":"hello"},"timeoutSeconds":60}`
	noToken, err := http.Post(queueURL+"/v1/namespaces/demo/pools/echo/invocations", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	noToken.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, noToken.StatusCode, "the ingress refuses a call without a token")
	req, err := http.NewRequest("POST", queueURL+"/v1/namespaces/demo/pools/echo/invocations", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+demoToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rec struct {
		State    string `json:"state"`
		Response struct {
			Body struct {
				Payload map[string]string `json:"payload"`
			} `json:"body"`
		} `json:"response"`
	}
	require.Equal(t, http.StatusOK, resp.StatusCode, "sync invocation: %s", data)
	require.NoError(t, json.Unmarshal(data, &rec), "sync invocation: %s", data)
	require.Equal(t, "succeeded", rec.State, "sync invocation: %s", data)
	require.Equal(t, "hello", rec.Response.Body.Payload["prompt"], "sync invocation: %s", data)

	// Every component's /metrics, as a scraper with the chart's
	// runplane-metrics-reader role reads it: 200 and promlint-clean, over
	// TLS verified as the chart's ServiceMonitors verify it (the CA bundle
	// of the component's Secret; the webhook's is its serving Secret).
	scrapers, err := scrape.New(ctx, kubeClient{client})
	require.NoError(t, err)
	var targets []promTarget
	for _, name := range devComponents {
		t.Run("metrics of "+name, func(t *testing.T) {
			require.Contains(t, metrics, name, "make dev printed no metrics: line for %s", name)
			scrapers.CheckClean(t, metrics[name])
			secret := metricsauth.SecretName(name)
			if name == "webhook" {
				secret = "runplane-webhook-tls"
			}
			sec, err := client.CoreV1().Secrets(api.DefaultNamespace).Get(ctx, secret, metav1.GetOptions{})
			require.NoError(t, err)
			scrapers.CheckVerified(t, metrics[name], "", sec.Data["ca-bundle.crt"])
			targets = append(targets, promTarget{component: name, service: serviceOf[name], url: metrics[name], ca: sec.Data["ca-bundle.crt"]})
			if name == "queue" {
				scrapers.NATSServers(t, metrics[name], natsServers)
			}
		})
	}

	// The chart's dashboard and alerts, against a real Prometheus scraping
	// make dev while invocations run.
	t.Run("dashboard and alerts in prometheus", func(t *testing.T) {
		require.Len(t, targets, len(devComponents))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		checkDashboard(ctx, t, targets, scrapers.Reader, func() { dashboardTraffic(ctx, t, client, queueURL, demoToken) })
	})

	// Ctrl-C: everything stops, nothing outlives it.
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		assert.NoError(t, err, "make dev exit after SIGINT:\n%s", output.String())
	case <-time.After(time.Minute):
		t.Fatalf("make dev still running a minute after SIGINT")
	}
	out, _ = exec.Command("pgrep", "-f", dir).Output()
	assert.Empty(t, bytes.TrimSpace(out), "processes outlived make dev")
}
