package rbac_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/internal/metricsauth"
	"github.com/runplane/runplane/queue/config"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/e2e/rbac"
	"github.com/runplane/runplane/test/kit"
	"github.com/runplane/runplane/test/scrape"
)

// releaseNS is where the chart is installed, as in production.
const releaseNS = api.DefaultNamespace

// gpuNode is the one node with a GPU; the extender test places a stock
// placeholder on it and takes it over.
const gpuNode = "rbac-gpu-0"

// draNode is the one node whose GPU only DRA publishes, draSpec the
// catalog's DRA spec (testdata/values.yaml): the extender test hands a DRA
// placeholder's claim over there.
const (
	draNode = "rbac-dra-0"
	draSpec = "h100.1"
)

// The namespaces the tests work in. All but webhookNS are excluded from
// the webhook (testdata/values.yaml), so their Pods do not depend on the
// in-process webhook running.
const (
	controllersNS = "rbac-controllers"
	queueNS       = "rbac-queue"
	extenderNS    = "rbac-extender"
	webhookNS     = "rbac-webhook"
)

var (
	env *cluster.Cluster
	// globalLog receives controller-runtime's process-wide logger (set once
	// per process); the controllers test checks it for denials too.
	globalLog = &rbac.Recorder{}

	installOnce sync.Once
	installErr  error
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.FromSlogHandler(globalLog.Logger().Handler()))
	cluster.Main(m, cluster.Options{Nodes: []cluster.Node{
		{Name: "rbac-cpu-0"},
		{Name: gpuNode, GPUs: 1, Labels: map[string]string{"rbac.runplane.io/gpu": "true"}},
		{Name: draNode, DRAGPUs: 1, Labels: map[string]string{"rbac.runplane.io/dra": "true"}},
	}}, func(c *cluster.Cluster) { env = c })
}

// install helm-installs the chart once for the package, the way
// charts/runplane/install_test.go does (helm's state kept out of $HOME).
func install(t *testing.T) {
	t.Helper()
	installOnce.Do(func() { installErr = helmInstall() })
	require.NoError(t, installErr)
}

func helmInstall() error {
	root, err := cluster.RepoRoot()
	if err != nil {
		return err
	}
	values, err := filepath.Abs(filepath.Join("testdata", "values.yaml"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	state := filepath.Join(env.Dir(), "helm")
	cmd := exec.CommandContext(ctx, env.Binary("helm"), "install", "runplane", filepath.Join(root, "charts", "runplane"),
		"--namespace", releaseNS, "--create-namespace", "--values", values, "--timeout", "2m")
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(state, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(state, "config"),
		"HELM_DATA_HOME="+filepath.Join(state, "data"),
		"KUBECONFIG="+env.Kubeconfig(),
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("helm install: %w\n%s", err, out.String())
	}
	for _, ns := range []string{controllersNS, queueNS, extenderNS, webhookNS} {
		if err := env.CreateNamespace(ctx, ns); err != nil {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	return nil
}

// checkNoDenials fails t with every denial rec recorded. Register it with
// t.Cleanup before the component's stop, so it runs after the stop.
func checkNoDenials(t *testing.T, who string, recs ...*rbac.Recorder) {
	t.Helper()
	if used := recs[0].Used(); len(used) > 0 {
		t.Logf("%s used: %s", who, strings.Join(used, ", "))
	}
	for _, rec := range recs {
		assert.Empty(t, rec.Denied(), "%s was denied under the chart's RBAC", who)
	}
	if t.Failed() {
		for _, rec := range recs {
			t.Logf("%s log:\n%s", who, kit.Tail(rec.Log(), 80))
		}
	}
}

// eventually polls cond every 100ms (wait.PollUntilContextTimeout) until it
// holds or within passes; the last error cond returned is in the failure.
// It gives up at once when rec (if not nil) has recorded a denial: the
// component cannot get there. That early stop is why the tests do not call
// require.Eventually directly.
func eventually(t *testing.T, rec *rbac.Recorder, within time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, within, true, func(context.Context) (bool, error) {
		ok, err := cond()
		if ok {
			return true, nil
		}
		last = err
		if rec != nil && len(rec.Denied()) > 0 {
			return false, errors.New("denied")
		}
		return false, nil
	})
	require.NoError(t, err, "waiting %s for %s (last error: %v)", within, what, last)
}

// chartConfigFile is the configuration file the chart installed for a
// component (the ConfigMap name's config.yaml), so the in-process
// components run with the chart's settings rather than copies of them.
func chartConfigFile(t *testing.T, name string) []byte {
	t.Helper()
	cm, err := env.Client().CoreV1().ConfigMaps(releaseNS).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err, "the chart's configuration %s", name)
	return []byte(cm.Data["config.yaml"])
}

// chartQueueConfig is the queue's configuration the chart installed (the
// ConfigMap runplane-queue), read by the queue's own loader.
func chartQueueConfig(t *testing.T) *config.QueueConfiguration {
	t.Helper()
	c, err := configfile.Decode[config.QueueConfiguration](chartConfigFile(t, "runplane-queue"))
	require.NoError(t, err)
	return c
}

// checkVerified is what the chart's ServiceMonitor does: verify the
// certificate of url against the CA bundle of the component's Secret, for
// the metrics Service's name (the chart's first host).
func checkVerified(ctx context.Context, t *testing.T, scrapers scrape.Scrapers, url string, c metricsauth.ServingCert) {
	t.Helper()
	sec, err := env.Client().CoreV1().Secrets(c.Secret.Namespace).Get(ctx, c.Secret.Name, metav1.GetOptions{})
	require.NoError(t, err)
	scrapers.CheckVerified(t, url, c.Hosts[0], sec.Data["ca-bundle.crt"])
}
