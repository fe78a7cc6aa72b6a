package rbac_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/extender"
	econfig "github.com/runplane/runplane/extender/config"
	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/internal/metricsauth"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/e2e/rbac"
	"github.com/runplane/runplane/test/kit"
	"github.com/runplane/runplane/test/scrape"
)

// g11 is a Pod of catalog spec g1.1 (testdata/values.yaml) as the webhook
// shapes it, pinned to the GPU node.
func g11(priorityClass string, grace int64) corev1.PodSpec {
	list := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		api.DefaultGPUResource: resource.MustParse("1"),
	}
	return corev1.PodSpec{
		SchedulerName:                 api.SchedulerName,
		PriorityClassName:             priorityClass,
		TerminationGracePeriodSeconds: ptr.To(grace),
		NodeSelector:                  map[string]string{"rbac.runplane.io/gpu": "true"},
		Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: list, Limits: list.DeepCopy()}}},
	}
}

// TestExtender: as runplane-scheduler (the ServiceAccount of the Pod the
// extender runs in), the extender reads the catalog, nodes and Pods, holds
// its Lease, binds a stock placeholder (a Binding), then gives a GPU Pod of
// the same spec the placeholder's node: it annotates the Pod with the
// claim, deletes the placeholder and binds the Pod. The rest of that Pod is
// proven too: kube-scheduler runs as the same ServiceAccount with the
// chart's own configuration (leader election included), pointed at the
// in-process extender. Then the same for a DRA spec (draTakeover): the
// placeholder's claim handed over.
func TestExtender(t *testing.T) {
	install(t)
	rec := &rbac.Recorder{}
	t.Cleanup(func() { checkNoDenials(t, "runplane-extender", rec) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	client := env.Client()
	ns := extenderNS

	// The settings the chart installed (the ConfigMap runplane-extender),
	// read by the extender's own loader.
	ec, err := configfile.Decode[econfig.ExtenderConfiguration](chartConfigFile(t, "runplane-extender"))
	require.NoError(t, err)
	require.NotEmpty(t, ec.LeaderElection.FollowLease, "the chart's extender follows its scheduler's Lease")
	// The chart keeps the verbs on loopback and serves /metrics and the
	// probes, and nothing else, on the Pod's interfaces.
	require.True(t, strings.HasPrefix(ec.Addr, "127.0.0.1:"), "the chart's extender verbs listen on %s", ec.Addr)
	require.NotEmpty(t, ec.Metrics.BindAddress)
	metrics, err := ec.Metrics.ServingCert()
	require.NoError(t, err)
	cfg := extender.Config{ExtenderConfiguration: *ec, RESTConfig: rec.As(env.RESTConfig(), releaseNS, "runplane-scheduler"), Logger: rec.Logger()}
	// This process's addresses, and a verbs certificate of its own (the
	// chart's files are its Pod's).
	cfg.Addr, cfg.Metrics.BindAddress, cfg.TLS = "127.0.0.1:0", "127.0.0.1:0", econfig.TLS{Hosts: []string{"127.0.0.1"}}
	ext, err := extender.Start(ctx, cfg)
	require.NoError(t, err, "extender.Start")
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, ext.Wait(), "extender")
	})
	checkListeners(t, ext, metrics)
	// /metrics: the extender reviews scrapers as the chart's ServiceAccount,
	// and the chart's runplane-metrics-reader ClusterRole lets one in.
	scrapers, err := scrape.New(ctx, env)
	require.NoError(t, err)
	scrapers.Check(t, "https://"+ext.MetricsAddr()+"/metrics", "runplane_extender_leader")
	schedLog := &rbac.Recorder{}
	t.Cleanup(func() { checkNoDenials(t, "kube-scheduler as runplane-scheduler", schedLog) })
	runScheduler(t, ext, schedLog)
	// The chart's extender follows the scheduler's Lease: it binds once the
	// kube-scheduler of its own Pod (here: this host) leads.
	eventually(t, schedLog, 30*time.Second, "kube-scheduler to lead and the extender to follow", func() (bool, error) {
		l, err := client.CoordinationV1().Leases(releaseNS).Get(ctx, "runplane-scheduler", metav1.GetOptions{})
		return err == nil && ptr.Deref(l.Spec.HolderIdentity, "") != "" && ext.IsLeader(), err
	})

	stock := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "stock-g1-1"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "stock-g1-1"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{api.LabelStock: "g1.1", "app": "stock-g1-1"}},
				Spec:       g11(api.PriorityClassStock, 0),
			},
		},
	}
	_, err = client.AppsV1().Deployments(ns).Create(ctx, stock, metav1.CreateOptions{})
	require.NoError(t, err)
	var placeholder corev1.Pod
	eventually(t, rec, 60*time.Second, "the placeholder bound to the GPU node and running", func() (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=stock-g1-1"})
		if err != nil || len(pods.Items) != 1 {
			return false, err
		}
		placeholder = pods.Items[0]
		return placeholder.Spec.NodeName == gpuNode && placeholder.Status.Phase == corev1.PodRunning,
			fmt.Errorf("placeholder on %q, phase %s", placeholder.Spec.NodeName, placeholder.Status.Phase)
	})

	work := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "work", Labels: map[string]string{api.LabelGPUSpec: "g1.1"}},
		Spec: g11(api.PriorityClassWorkload, 30)}
	_, err = client.CoreV1().Pods(ns).Create(ctx, work, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, rec, 60*time.Second, "the GPU Pod bound to the placeholder's node with the claim", func() (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, "work", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		claim := p.Annotations[api.AnnotationClaimedStock]
		return p.Spec.NodeName == gpuNode && strings.Contains(claim, string(placeholder.UID)),
			fmt.Errorf("node %q, claim %q", p.Spec.NodeName, claim)
	})
	_, err = client.CoreV1().Pods(ns).Get(ctx, placeholder.Name, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the claimed placeholder %s still exists (%v)", placeholder.Name, err)

	draTakeover(ctx, t, rec)
}

// draTakeover: the extender hands a DRA placeholder's allocated claim to a
// GPU Pod of the same spec (extender/README.md, "Stock for DRA specs"):
// under the chart's RBAC and admission policies (runplane-scheduler-pod-status
// admits naming the claim in the unbound Pod's status), the Pod is bound on
// the placeholder's node with the placeholder's claim, and the placeholder
// is gone.
func draTakeover(ctx context.Context, t *testing.T, rec *rbac.Recorder) {
	t.Helper()
	client := env.Client()
	ns := extenderNS
	cm, err := client.CoreV1().ConfigMaps(releaseNS).Get(ctx, api.CatalogConfigMap, metav1.GetOptions{})
	require.NoError(t, err)
	cat, err := catalog.Parse(cm.Data)
	require.NoError(t, err, "the chart's catalog")
	spec, err := cat.Lookup(api.LabelGPUSpec, draSpec)
	require.NoError(t, err)
	require.True(t, spec.IsDRA(), "testdata/values.yaml: %s is a DRA spec", draSpec)
	// What runplane-controller keeps in a namespace with Pods of the spec.
	_, err = client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, spec.ClaimTemplate(ns), metav1.CreateOptions{})
	require.NoError(t, err)

	stock := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "stock-dra"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "stock-dra"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{api.LabelStock: draSpec, "app": "stock-dra"}},
				Spec:       draPodSpec(api.PriorityClassStock, 0),
			},
		},
	}
	_, err = client.AppsV1().Deployments(ns).Create(ctx, stock, metav1.CreateOptions{})
	require.NoError(t, err)
	var placeholder corev1.Pod
	var claim string
	eventually(t, rec, 60*time.Second, "the DRA placeholder bound to the DRA node with its claim allocated", func() (bool, error) {
		pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=stock-dra"})
		if err != nil || len(pods.Items) != 1 {
			return false, err
		}
		placeholder = pods.Items[0]
		if placeholder.Spec.NodeName != draNode || len(placeholder.Status.ResourceClaimStatuses) != 1 {
			return false, fmt.Errorf("placeholder on %q, claims %+v", placeholder.Spec.NodeName, placeholder.Status.ResourceClaimStatuses)
		}
		claim = ptr.Deref(placeholder.Status.ResourceClaimStatuses[0].ResourceClaimName, "")
		c, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		return err == nil && c.Status.Allocation != nil, err
	})

	work := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "work-dra", Labels: map[string]string{api.LabelGPUSpec: draSpec}},
		Spec: draPodSpec(api.PriorityClassWorkload, 30)}
	_, err = client.CoreV1().Pods(ns).Create(ctx, work, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, rec, 60*time.Second, "the DRA GPU Pod bound to the placeholder's node with the placeholder's claim", func() (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, work.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var named string
		if len(p.Status.ResourceClaimStatuses) == 1 {
			named = ptr.Deref(p.Status.ResourceClaimStatuses[0].ResourceClaimName, "")
		}
		return p.Spec.NodeName == draNode && named == claim, fmt.Errorf("node %q, claim %q (the placeholder's: %s)", p.Spec.NodeName, named, claim)
	})
	_, err = client.CoreV1().Pods(ns).Get(ctx, placeholder.Name, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the DRA placeholder %s still exists (%v)", placeholder.Name, err)
}

// draPodSpec is a Pod of the DRA catalog spec (testdata/values.yaml) as the
// webhook shapes it, pinned to the DRA node: its claim from runplane's
// template, no extended resource.
func draPodSpec(priorityClass string, grace int64) corev1.PodSpec {
	list := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi")}
	spec := corev1.PodSpec{
		SchedulerName:                 api.SchedulerName,
		PriorityClassName:             priorityClass,
		TerminationGracePeriodSeconds: ptr.To(grace),
		NodeSelector:                  map[string]string{"rbac.runplane.io/dra": "true"},
		Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: list, Limits: list.DeepCopy()}}},
	}
	cluster.UseClaimTemplate(&spec, catalog.ClaimTemplateName(draSpec))
	return spec
}

// runScheduler runs kube-scheduler the way the chart's runplane-scheduler
// Pod does: its configuration is the chart's ConfigMap (the extender's
// address and CA changed to the in-process extender's), and every request,
// delegated authentication included, is made as the ServiceAccount. Its
// log goes to rec, where klog reports denials.
func runScheduler(t *testing.T, ext *extender.Extender, rec *rbac.Recorder) {
	t.Helper()
	cm, err := env.Client().CoreV1().ConfigMaps(releaseNS).Get(t.Context(), "runplane-scheduler", metav1.GetOptions{})
	require.NoError(t, err)
	var cfg configv1.KubeSchedulerConfiguration
	require.NoError(t, yaml.UnmarshalStrict([]byte(cm.Data["config.yaml"]), &cfg), "the chart's scheduler config")
	require.Len(t, cfg.Extenders, 1, "the chart's scheduler config has one extender")
	require.NotNil(t, cfg.Extenders[0].TLSConfig, "the chart's extender is called over HTTPS")
	dir := t.TempDir()
	cfg.Extenders[0].URLPrefix = "https://" + ext.Addr()
	cfg.Extenders[0].TLSConfig.CAFile, cfg.Extenders[0].TLSConfig.CAData = "", ext.CACert()

	// The admin kubeconfig, impersonating the ServiceAccount.
	kc, err := clientcmd.LoadFromFile(env.Kubeconfig())
	require.NoError(t, err)
	for _, ai := range kc.AuthInfos {
		ai.Impersonate = rbac.ServiceAccountUser(releaseNS, "runplane-scheduler")
		ai.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNS}
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, kubeconfig))
	cfg.ClientConnection.Kubeconfig = kubeconfig
	cfg.APIVersion, cfg.Kind = configv1.SchemeGroupVersion.String(), "KubeSchedulerConfiguration"
	data, err := yaml.Marshal(&cfg)
	require.NoError(t, err)
	config := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(config, data, 0o600))
	port, err := kit.FreePort("127.0.0.1")
	require.NoError(t, err)
	cmd := exec.Command(env.Binary("kube-scheduler"), "--config="+config,
		"--authentication-kubeconfig="+kubeconfig, "--authorization-kubeconfig="+kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port), "--v=1")
	cmd.Stdout, cmd.Stderr = rec, rec
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			t.Logf("kube-scheduler stopped: %v", err) // SIGTERM's exit status, for the record
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Logf("kube-scheduler killed: %v", <-exited)
		}
	})
	// It serves /healthz with a self-signed certificate.
	insecure := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	eventually(t, nil, 30*time.Second, "kube-scheduler /healthz", func() (bool, error) {
		select {
		case err := <-exited:
			require.Failf(t, "kube-scheduler exited", "%v\n%s", err, kit.Tail(rec.Log(), 40))
		default:
		}
		resp, err := insecure.Get("https://127.0.0.1:" + strconv.Itoa(port) + "/healthz")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("%s", resp.Status)
	})
}

// checkListeners: the verbs answer on Addr only, /metrics (to a scraper
// only: 401 here) and the probes on MetricsAddr only. The metrics listener
// is verified as the chart's ServiceMonitor does (metrics's CA bundle and
// server name), the verbs as kube-scheduler does (the extender's CA).
func checkListeners(t *testing.T, ext *extender.Extender, metrics metricsauth.ServingCert) {
	t.Helper()
	client := func(caPEM []byte, serverName string) *http.Client {
		pool := x509.NewCertPool()
		require.True(t, pool.AppendCertsFromPEM(caPEM))
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName}}}
	}
	sec, err := env.Client().CoreV1().Secrets(metrics.Secret.Namespace).Get(t.Context(), metrics.Secret.Name, metav1.GetOptions{})
	require.NoError(t, err)
	verbsClient, metricsClient := client(ext.CACert(), ""), client(sec.Data["ca-bundle.crt"], metrics.Hosts[0])
	status := func(method, addr, path string) int {
		c := verbsClient
		if addr == ext.MetricsAddr() {
			c = metricsClient
		}
		req, err := http.NewRequestWithContext(t.Context(), method, "https://"+addr+path, strings.NewReader("{}"))
		require.NoError(t, err)
		resp, err := c.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{extender.FilterPath, extender.PrioritizePath, extender.BindPath} {
		assert.Equal(t, http.StatusNotFound, status(http.MethodPost, ext.MetricsAddr(), path), "%s on the metrics listener", path)
		assert.NotEqual(t, http.StatusNotFound, status(http.MethodPost, ext.Addr(), path), "%s on the verb listener", path)
	}
	for path, code := range map[string]int{"/metrics": http.StatusUnauthorized, "/healthz": http.StatusOK, "/readyz": http.StatusOK} {
		assert.Equal(t, code, status(http.MethodGet, ext.MetricsAddr(), path), "%s on the metrics listener", path)
		assert.Equal(t, http.StatusNotFound, status(http.MethodGet, ext.Addr(), path), "%s on the verb listener", path)
	}
}
