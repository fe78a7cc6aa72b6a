package helmnode

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

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/runplane/runplane/hack/images"
	"github.com/runplane/runplane/test/cluster"
)

const (
	release   = "runplane"
	releaseNS = "runplane-system"
	testNS    = "runplane-helm-test"
	stockNS   = "runplane-stock"
)

// placement puts a component on the real node: the only node that runs
// containers, tainted and labelled cluster.RealNodeTaint.
var placement = fmt.Sprintf(`
  nodeSelector: {%q: "true"}
  tolerations: [{key: %q, operator: Exists, effect: NoSchedule}]`, cluster.RealNodeLabel, cluster.RealNodeTaint)

// values installs one replica of everything on the real node, from the
// images hack/images built and the node imported (pullPolicy Never: an
// image missing there fails at once instead of waiting on a pull).
func values() string {
	image := func(ref string) string {
		i := strings.LastIndex(ref, ":")
		repo, tag := ref[:i], ref[i+1:]
		return fmt.Sprintf("{repository: %s, tag: %q, pullPolicy: Never}", repo, tag)
	}
	return `image: ` + image(images.RunplaneRef) + `
catalog:
  specs:
    rn1:
      gpu: 1
      cpu: 100m
      memory: 64Mi` + strings.ReplaceAll(placement, "\n  ", "\n      ") + `
webhook:
  replicas: 1
  pauseImage: ` + images.PauseRef + placement + `
controller:
  replicas: 1` + placement + `
queue:
  replicas: 1` + placement + `
scheduler:
  replicas: 1
  image: ` + image(images.KubeSchedulerRef) + placement + `
nats:
  bundled:
    image: ` + image(images.NATSRef) + `
    persistence: {size: 10Gi} # as large as jetstream.maxFileStore (hostPath: nothing allocated)` + strings.ReplaceAll(placement, "\n  ", "\n    ") + `
stock:
  namespace: ` + stockNS + `
  pools: [{spec: rn1, replicas: ` + fmt.Sprint(cluster.RealNodeGPUs) + `}]
networkPolicy:
  # Scrapers: the chart's default (namespace monitoring) and the test process (metrics_test.go), on
  # the host: its address on the node's link.
  monitoring:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}
    - ipBlock: {cidr: ` + env.RealNodes()[0].HostIP + `/32}
helmTest:
  namespace: ` + testNS + `
  timeout: 3m` + placement + `
`
}

// TestInstallAndInvoke: `helm install` of the chart, every Deployment and
// StatefulSet of the release Available on the real node, then `helm test`
// as the install's NOTES give it: one synchronous invocation of a pool at
// zero (framework-echo) by a ServiceAccount bound to runplane-invoker,
// through the queue's Service (ingress, activator, scale from zero, the
// webhook's injection, the NATS auth callout, the worker sidecar); then a
// tenant's own pool invoked from the test process (host_test.go).
func TestInstallAndInvoke(t *testing.T) {
	needNode(t)
	ctx := t.Context()
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	valuesFile := filepath.Join(t.TempDir(), "values.yaml")
	require.NoError(t, os.WriteFile(valuesFile, []byte(values()), 0o600))
	t.Logf("values:\n%s", values())

	began := time.Now()
	notes := helm(t, 3*time.Minute, "install", release, filepath.Join(root, "charts", "runplane"), "--namespace", releaseNS, "--create-namespace",
		"--values", valuesFile, "--timeout", "2m")
	t.Logf("helm install returned in %s", time.Since(began).Round(100*time.Millisecond))
	waitAvailable(ctx, t, 5*time.Minute)
	t.Logf("every workload of the release Available %s after helm install began", time.Since(began).Round(100*time.Millisecond))

	t.Run("every component's metrics", func(t *testing.T) { scrapeEveryComponent(ctx, t) })

	// The stock placeholders went through the chart's runplane-scheduler (the
	// kube-scheduler image and the extender) to the real node.
	placeholders, err := env.Client().CoreV1().Pods(stockNS).List(ctx, metav1.ListOptions{LabelSelector: "runplane.io/stock=rn1"})
	require.NoError(t, err)
	require.Len(t, placeholders.Items, cluster.RealNodeGPUs, "one placeholder per GPU of the node")
	for _, p := range placeholders.Items {
		require.Equal(t, "runplane-scheduler", p.Spec.SchedulerName)
		require.Equal(t, env.RealNodes()[0].Name, p.Spec.NodeName, "the placeholder's node")
		require.Equal(t, corev1.PodRunning, p.Status.Phase)
	}

	// The commands the install's NOTES give users, as they are.
	helmTest, logs := notesCommand(t, notes, "helm test "), notesCommand(t, notes, "kubectl -n "+testNS+" logs ")
	invoked := time.Now()
	out, err := run(t, 5*time.Minute, helmTest[0], helmTest[1:]...)
	t.Logf("%s (%s):\n%s", strings.Join(helmTest, " "), time.Since(invoked).Round(100*time.Millisecond), out)
	if err != nil {
		dumpNamespace(t, testNS)
		dumpNamespace(t, releaseNS)
		t.Fatalf("helm test: %v", err)
	}
	require.Contains(t, out, "Phase:          Succeeded", "helm test did not report success")
	out, err = run(t, time.Minute, logs[0], logs[1:]...)
	require.NoError(t, err, "%s", out)
	t.Logf("%s:\n%s", strings.Join(logs, " "), out)
	require.Contains(t, out, `"state":"succeeded"`, "the test Pod printed no succeeded Record")
	require.Contains(t, out, `"payload":{"check":"runplane-invoke"}`, "the Record holds no echo of the payload")

	t.Run("the chart's network policies", func(t *testing.T) {
		t.Cleanup(func() {
			if t.Failed() {
				dumpNamespace(t, "team-probe")
			}
		})
		chartPolicies(ctx, t)
	})

	t.Run("a tenant's pool invoked from the host", func(t *testing.T) {
		t.Cleanup(func() {
			if t.Failed() {
				dumpNamespace(t, "team-host")
			}
		})
		invokeFromHost(ctx, t)
	})

	t.Run("a GPU Pod takes over a placeholder", func(t *testing.T) {
		t.Cleanup(func() {
			if t.Failed() {
				dumpNamespace(t, "team-gpu")
				dumpNamespace(t, stockNS)
			}
		})
		gpuTakeover(ctx, t)
	})

	t.Run("uninstall", func(t *testing.T) {
		t.Cleanup(func() {
			if t.Failed() { // what helm was still waiting for
				dumpNamespace(t, releaseNS)
				dumpNamespace(t, stockNS)
			}
		})
		// 15–25 s alone; twice past 2 minutes in a whole make test at load
		// ~18 (the bundled NATS's lame duck, 30 s + 10 s, and every Pod's
		// stop on a real kubelet sharing two busy cores): the time is logged.
		start := time.Now()
		stopWatching := logWhatRemains(t, 20*time.Second)
		helm(t, 5*time.Minute, "uninstall", release, "--namespace", releaseNS, "--wait", "--timeout", "4m")
		stopWatching()
		t.Logf("helm uninstall --wait took %s", time.Since(start).Round(time.Second))
		client := env.Client()
		_, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "runplane-webhook", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "the MutatingWebhookConfiguration outlived the release: %v", err)
		// Every Pod of the release goes: the real kubelet stops them.
		for _, ns := range []string{releaseNS, stockNS} {
			err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
				pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
				return err == nil && len(pods.Items) == 0, nil
			})
			if err != nil {
				dumpNamespace(t, ns)
				t.Fatalf("Pods left in %s after helm uninstall: %v", ns, err)
			}
		}
	})
}

// notesCommand returns the command line of the install's NOTES that starts
// with prefix, split into words.
func notesCommand(t *testing.T, notes, prefix string) []string {
	t.Helper()
	for _, l := range strings.Split(notes, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, prefix) {
			return strings.Fields(l)
		}
	}
	t.Fatalf("the install's NOTES have no line %q...:\n%s", prefix, notes)
	return nil
}

// waitAvailable waits until every Deployment and StatefulSet of the
// release (the stock pools' in their namespace too) has all its replicas
// ready and up to date; on timeout it prints the Pods, their events and
// logs.
func waitAvailable(ctx context.Context, t *testing.T, timeout time.Duration) {
	t.Helper()
	client := env.Client()
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release}
	var pending []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		pending = nil
		deps, err := client.AppsV1().Deployments("").List(ctx, sel)
		if err != nil {
			return false, err
		}
		for _, d := range deps.Items {
			if !deploymentAvailable(&d) {
				pending = append(pending, "Deployment "+d.Namespace+"/"+d.Name)
			}
		}
		sets, err := client.AppsV1().StatefulSets(releaseNS).List(ctx, sel)
		if err != nil {
			return false, err
		}
		for _, s := range sets.Items {
			if s.Spec.Replicas == nil || s.Status.ReadyReplicas != *s.Spec.Replicas || s.Status.UpdatedReplicas != *s.Spec.Replicas {
				pending = append(pending, "StatefulSet "+s.Name)
			}
		}
		if len(deps.Items) == 0 || len(sets.Items) == 0 {
			pending = append(pending, "the release's workloads (none listed yet)")
		}
		return len(pending) == 0, nil
	})
	if err != nil {
		dumpNamespace(t, releaseNS)
		dumpNamespace(t, stockNS)
		t.Fatalf("not Available within %s: %s: %v", timeout, strings.Join(pending, ", "), err)
	}
}

func deploymentAvailable(d *appsv1.Deployment) bool {
	if d.Spec.Replicas == nil || d.Status.ObservedGeneration < d.Generation ||
		d.Status.UpdatedReplicas != *d.Spec.Replicas || d.Status.AvailableReplicas != *d.Spec.Replicas {
		return false
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// dumpNamespace logs the state of ns: its objects, events, and each Pod's
// description and logs (the current and the previous container's).
// logWhatRemains logs, every period until the returned func is called,
// which of the release's objects are still there — what helm uninstall
// --wait waits for — with their deletion time and finalizers, and the Pods
// of its namespaces. It took 2–3 minutes in whole runs (15–25 s alone): in
// one, helm test's Namespace (testNS) was what was left for ~2 minutes.
func logWhatRemains(t *testing.T, period time.Duration) (stop func()) {
	manifest := filepath.Join(t.TempDir(), "manifest.yaml")
	require.NoError(t, os.WriteFile(manifest, []byte(helm(t, time.Minute, "get", "manifest", release, "--namespace", releaseNS)), 0o600))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Never done: it lists until ctx ends.
		_ = wait.PollUntilContextCancel(ctx, period, false, func(ctx context.Context) (bool, error) {
			out, err := run(t, time.Minute, "kubectl", "get", "-f", manifest, "--ignore-not-found", "--no-headers",
				"-o", "custom-columns=KIND:.kind,NAMESPACE:.metadata.namespace,NAME:.metadata.name,DELETED:.metadata.deletionTimestamp,FINALIZERS:.metadata.finalizers")
			// And the Pods of its namespaces (a Namespace goes after them):
			// their grace and which containers still run.
			pods, perr := run(t, time.Minute, "kubectl", "get", "pods", "-A", "--no-headers",
				"-o", "custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,DELETED:.metadata.deletionTimestamp,GRACE:.spec.terminationGracePeriodSeconds,RUNNING:.status.containerStatuses[?(@.state.running)].name")
			for _, l := range strings.Split(pods, "\n") {
				if ns, _, _ := strings.Cut(l, " "); ns == releaseNS || ns == stockNS || ns == testNS {
					out += l + "\n"
				}
			}
			// A terminating Namespace with no Pod left: the namespace
			// controller's conditions say what it still waits for.
			nss, nerr := run(t, time.Minute, "kubectl", "get", "namespaces", stockNS, testNS, "--ignore-not-found", "--no-headers",
				"-o", `custom-columns=NAME:.metadata.name,PHASE:.status.phase,WAITING:.status.conditions[?(@.status=="True")].message`)
			out += nss
			perr = errors.Join(perr, nerr)
			switch {
			case ctx.Err() != nil:
			case err != nil || perr != nil:
				t.Logf("listing what is still there: %v, %v\n%s", err, perr, out)
			case strings.TrimSpace(out) != "":
				t.Logf("still there:\n%s", out)
			}
			return false, nil
		})
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop) // no Logf after the test ends, also when helm fails it
	return stop
}

func dumpNamespace(t *testing.T, ns string) {
	t.Helper()
	out, _ := run(t, time.Minute, "kubectl", "get", "all,pvc,events", "-n", ns, "-o", "wide")
	t.Logf("===== namespace %s:\n%s", ns, out)
	pods, err := env.Client().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Logf("listing Pods of %s: %v", ns, err)
		return
	}
	for _, p := range pods.Items {
		out, _ := run(t, time.Minute, "kubectl", "describe", "pod", "-n", ns, p.Name)
		t.Logf("===== pod %s/%s:\n%s", ns, p.Name, out)
		for _, previous := range []string{"false", "true"} {
			out, _ := run(t, time.Minute, "kubectl", "logs", "-n", ns, p.Name, "--all-containers", "--prefix", "--tail=60", "--previous="+previous)
			t.Logf("----- logs of %s/%s (previous=%s):\n%s", ns, p.Name, previous, out)
		}
	}
}

func helm(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	out, err := run(t, timeout, "helm", args...)
	require.NoError(t, err, "%s", out)
	return out
}

// run runs a testbin binary (helm, kubectl) against the cluster, with
// helm's state kept out of $HOME; the output is stdout and stderr.
func run(t *testing.T, timeout time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	state := t.TempDir()
	cmd := exec.CommandContext(ctx, env.Binary(name), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig(),
		"HELM_CACHE_HOME="+filepath.Join(state, "cache"), "HELM_CONFIG_HOME="+filepath.Join(state, "config"), "HELM_DATA_HOME="+filepath.Join(state, "data"))
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return b.String(), err
}
