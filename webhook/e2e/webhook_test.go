package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/internal/pki"
	"github.com/runplane/runplane/webhook"
	"github.com/runplane/runplane/webhook/config"
	"github.com/runplane/runplane/webhook/mutate"
)

// A Deployment's Pods (created by the ReplicaSet controller with
// generateName) carry everything the webhook injects; and the stored,
// API-defaulted Pod mutated again changes nothing but the injected
// annotation, so reinvocation is a no-op against real defaulting too.
func TestDeploymentPodsAreInjected(t *testing.T) {
	startWebhook(t)
	c := env.Client()
	ns := env.Namespace(t, "team-deploy")
	ctx := context.Background()
	labels := map[string]string{"app": "llm", api.LabelGPUSpec: "g1.1", api.LabelPool: "llm", api.LabelSSH: api.SSHEnabled}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "llm", Labels: map[string]string{api.LabelPool: "llm"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "llm"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
					api.AnnotationSSHAuthorizedKeys: "alice-keys", api.AnnotationConcurrency: "3"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "framework", Image: "example.com/llm:1", Command: []string{"serve"}}}},
			},
		},
	}
	_, err := c.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{})
	require.NoError(t, err)
	var pods []corev1.Pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list, err := env.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=llm"})
		require.NoError(c, err)
		require.Len(c, list.Items, 2, "Pods of the Deployment")
		pods = list.Items
	}, 60*time.Second, 200*time.Millisecond)
	for _, p := range pods {
		require.True(t, strings.HasPrefix(p.GenerateName, "llm-"), "Pod %s: not created with generateName", p.Name)
		require.Equal(t, "runplane-worker,runplane-ssh-install", names(p.Spec.InitContainers), "Pod %s init containers", p.Name)
		main := p.Spec.Containers[0]
		// The SSH server runs in the main container, started by the
		// launcher in front of its command.
		require.Equal(t, "serve", main.Command[len(main.Command)-1], "Pod %s: main command %v", p.Name, main.Command)
		require.Equal(t, mutate.SSHBinaryDir+"/runplane-ssh", main.Command[0], "Pod %s: main command %v", p.Name, main.Command)
		q := main.Resources.Limits[api.DefaultGPUResource]
		require.Zero(t, q.Cmp(resource.MustParse("1")), "Pod %s GPU limit %s", p.Name, q.String())
		require.Equal(t, api.SchedulerName, p.Spec.SchedulerName)
		require.Equal(t, api.PriorityClassWorkload, p.Spec.PriorityClassName)
		require.EqualValues(t, 1000, ptr.Deref(p.Spec.Priority, 0))
		require.Equal(t, api.EgressRestricted, p.Labels[api.LabelEgress])
		require.True(t, strings.HasPrefix(p.Annotations[api.AnnotationInjected], "gpu-spec,pool,ssh hash="), "annotations %v", p.Annotations)
		require.Equal(t, "3", envOf(p.Spec.InitContainers[0], api.EnvConcurrency), "sidecar concurrency")
		for _, m := range main.VolumeMounts {
			require.NotEqual(t, mutate.VolumeNATSCredentials, m.Name, "main container mounts")
		}

		// Reinvocation against the real, defaulted object.
		again := p.DeepCopy()
		delete(again.Annotations, api.AnnotationInjected)
		res, err := testMutator(t).Mutate(ctx, again, ns)
		require.NoError(t, err)
		delete(res.Pod.Annotations, api.AnnotationInjected)
		want, err := json.Marshal(again)
		require.NoError(t, err)
		got, err := json.Marshal(res.Pod)
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(got), "mutating the stored Pod again changes it (defaults missing from injected objects?)")
	}
}

// testMutator mirrors the injection config of startWebhook, with the real
// cluster's PriorityClass value.
func testMutator(t *testing.T) *mutate.Mutator {
	cat, err := catalog.Parse(map[string]string{"g1.1": "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\n"})
	require.NoError(t, err)
	return &mutate.Mutator{
		Config: mutate.Config{Image: "runplane:e2e", PauseImage: "registry.k8s.io/pause:3.10", NATSURL: "nats://127.0.0.1:4222",
			SubjectPrefix: api.DefaultSubjectPrefix, StreamName: api.DefaultStreamName, Resources: mutate.DefaultSidecarResources()},
		Catalog:         func() catalog.Catalog { return cat },
		PVCs:            clusterPVCs{},
		PriorityClasses: clusterPCs{},
	}
}

type clusterPVCs struct{}

func (clusterPVCs) GetPVC(ctx context.Context, ns, name string) (*corev1.PersistentVolumeClaim, error) {
	p, err := env.Client().CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return p, err
}

type clusterPCs struct{}

func (clusterPCs) GetPriorityClass(ctx context.Context, name string) (*schedulingv1.PriorityClass, error) {
	p, err := env.Client().SchedulingV1().PriorityClasses().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return p, err
}

func names(cs []corev1.Container) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return strings.Join(out, ",")
}

func envOf(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// A user of kubectl apply reads which webhook refused the Pod and why.
func TestDenialSeenByKubectl(t *testing.T) {
	startWebhook(t)
	ns := env.Namespace(t, "team-deny")
	tests := []struct {
		name, manifest, want string
	}{
		{"unknown spec", `
apiVersion: v1
kind: Pod
metadata: {name: bad-spec, labels: {runplane.io/gpu-spec: g9.9}}
spec: {containers: [{name: main, image: busybox}]}`,
			`admission webhook "gpu-spec.runplane.io" denied the request: label runplane.io/gpu-spec: unknown GPU spec "g9.9"; known specs: `},
		{"ssh without keys", `
apiVersion: v1
kind: Pod
metadata: {name: bad-ssh, labels: {runplane.io/ssh: enabled}}
spec: {containers: [{name: main, image: busybox}]}`,
			`admission webhook "ssh.runplane.io" denied the request: annotation runplane.io/ssh-authorized-keys: missing`},
		{"conflicting GPU request", `
apiVersion: v1
kind: Pod
metadata: {name: bad-gpu, labels: {runplane.io/gpu-spec: g1.1}}
spec: {containers: [{name: main, image: busybox, resources: {limits: {nvidia.com/gpu: "4"}}}]}`,
			`denied the request: label runplane.io/gpu-spec: container "main" resource nvidia.com/gpu: the container asks for 4 but GPU spec "g1.1" gives 1`},
		{"claim with two sources", `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: bad-claim, annotations: {runplane.io/prepare-from-image: busybox, runplane.io/prepare-from-pvc: other}}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}`,
			`admission webhook "pvc.runplane.io" denied the request: annotation runplane.io/prepare-from-image: cannot be combined with runplane.io/prepare-from-pvc`},
		{"claim command not JSON", `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: bad-command, annotations: {runplane.io/prepare-from-image: busybox, runplane.io/prepare-command: "sh -c true"}}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}`,
			`annotation runplane.io/prepare-command: invalid value "sh -c true": it must be a JSON array of strings`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := kubectl(t, tt.manifest, "apply", "-n", ns, "-f", "-")
			require.Error(t, err, "kubectl apply succeeded: %s", out)
			require.Contains(t, out, tt.want)
			t.Logf("kubectl: %s", strings.TrimSpace(out))
		})
	}
}

// A server-side dry-run shows the mutated Pod and stores nothing.
func TestServerSideDryRun(t *testing.T) {
	startWebhook(t)
	ns := env.Namespace(t, "team-dryrun")
	out, err := kubectl(t, `
apiVersion: v1
kind: Pod
metadata: {name: worker, labels: {runplane.io/pool: echo}}
spec: {containers: [{name: framework, image: example.com/echo:1}]}`, "apply", "-n", ns, "--dry-run=server", "-o", "json", "-f", "-")
	require.NoError(t, err, out)
	var pod corev1.Pod
	require.NoError(t, json.Unmarshal([]byte(out), &pod), out)
	require.Equal(t, api.SidecarContainerName, names(pod.Spec.InitContainers), "dry-run Pod not mutated: %s", out)
	require.Equal(t, "echo", envOf(pod.Spec.Containers[0], api.EnvPool), "dry-run Pod not mutated: %s", out)
	_, err = env.Client().CoreV1().Pods(ns).Get(context.Background(), "worker", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "dry-run stored the Pod: %v", err)
}

// A spec added to the catalog ConfigMap is used without a restart.
func TestCatalogChangeFollowed(t *testing.T) {
	startWebhook(t)
	c := env.Client()
	ctx := context.Background()
	ns := env.Namespace(t, "team-catalog")
	cm, err := c.CoreV1().ConfigMaps(runplaneNS).Get(ctx, api.CatalogConfigMap, metav1.GetOptions{})
	require.NoError(t, err)
	cm.Data["g2.new"] = "gpu: 2\ncpu: \"16\"\nmemory: 64Gi\n"
	_, err = c.CoreV1().ConfigMaps(runplaneNS).Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		pod, err := c.CoreV1().Pods(ns).Create(ctx, gpuPod("new-spec", "g2.new"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(ct, err, "the new spec admitted")
		q := pod.Spec.Containers[0].Resources.Limits[api.DefaultGPUResource]
		require.Zero(ct, q.Cmp(resource.MustParse("2")), "GPU limit %s", q.String())
	}, 30*time.Second, 200*time.Millisecond)
}

// A Pod mounting a claim still being prepared is gated; one mounting only
// ready claims is admitted unchanged; claims' status writes by runplane's
// controllers pass validation.
func TestStorageGate(t *testing.T) {
	startWebhook(t)
	c := env.Client()
	ctx := context.Background()
	ns := env.Namespace(t, "team-storage")
	mk := func(name string, a map[string]string) {
		t.Helper()
		_, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: a},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	mk("model", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36", api.AnnotationPrepareCommand: `["sh","-c","true"]`})
	mk("plain", nil)
	pod := func(name, claimName string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Image: "busybox"}},
				Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName}}}},
			},
		}
	}
	gated, err := c.CoreV1().Pods(ns).Create(ctx, pod("reader", "model"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Equal(t, []corev1.PodSchedulingGate{{Name: api.SchedulingGateStorage}}, gated.Spec.SchedulingGates)
	plain, err := c.CoreV1().Pods(ns).Create(ctx, pod("plain-reader", "plain"), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Empty(t, plain.Spec.SchedulingGates, "plain claim Pod gated")
	require.Empty(t, plain.Annotations[api.AnnotationInjected], "plain claim Pod injected")

	// The controller reports success; a new Pod is no longer gated.
	// The PV binder updates the claim too: retry on a write conflict.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		claim, err := c.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "model", metav1.GetOptions{})
		if err != nil {
			return err
		}
		claim.Annotations[api.AnnotationPreparePhase] = api.PhaseSucceeded
		claim.Annotations[api.AnnotationPrepareObservedAttempt] = "0"
		_, err = c.CoreV1().PersistentVolumeClaims(ns).Update(ctx, claim, metav1.UpdateOptions{})
		return err
	})
	require.NoError(t, err, "status write refused")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p, err := c.CoreV1().Pods(ns).Create(ctx, pod("reader-2", "model"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(ct, err)
		require.Empty(ct, p.Spec.SchedulingGates, "a Pod gated after preparation")
	}, 20*time.Second, 200*time.Millisecond)
}

// The TLS material lives in a Secret, survives a restart, and the caBundle
// is repaired when someone changes it.
func TestCertificateSecretAndCABundleDrift(t *testing.T) {
	r := startWebhook(t)
	c := env.Client()
	ctx := context.Background()
	sec, err := c.CoreV1().Secrets(runplaneNS).Get(ctx, "runplane-webhook-tls", metav1.GetOptions{})
	require.NoError(t, err)
	bundle := sec.Data[pki.KeyCABundle]
	mwc, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhook.DefaultConfigurationName, metav1.GetOptions{})
	require.NoError(t, err)
	for _, w := range mwc.Webhooks {
		require.Equal(t, bundle, w.ClientConfig.CABundle, "webhook %s caBundle differs from the Secret's", w.Name)
	}

	// Drift: another CA in every entry; the watch repairs it.
	other, err := pki.Renew(nil, pki.Options{DNSNames: []string{"x"}})
	require.NoError(t, err)
	for i := range mwc.Webhooks {
		mwc.Webhooks[i].ClientConfig.CABundle = other.CABundle
	}
	_, err = c.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, mwc, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		m, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhook.DefaultConfigurationName, metav1.GetOptions{})
		require.NoError(ct, err)
		for _, w := range m.Webhooks {
			require.Equal(ct, bundle, w.ClientConfig.CABundle, "the caBundle of %s repaired", w.Name)
		}
	}, 20*time.Second, 200*time.Millisecond)

	// Restart: the same CA is loaded, not a new one.
	r.stop()
	startWebhook(t)
	sec2, err := c.CoreV1().Secrets(runplaneNS).Get(ctx, "runplane-webhook-tls", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, bundle, sec2.Data[pki.KeyCABundle], "restart replaced the CA")
	require.Equal(t, sec.Data[corev1.TLSCertKey], sec2.Data[corev1.TLSCertKey], "restart replaced the serving certificate")
}

// Unlabelled Pods never reach the webhook: they are admitted unchanged even
// while it is down, while labelled Pods are refused (failurePolicy Fail).
func TestUnlabelledPodAdmittedWhileWebhookDown(t *testing.T) {
	r := startWebhook(t)
	r.stop()
	c := env.Client()
	ctx := context.Background()
	ns := env.Namespace(t, "team-down")
	in := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plain", Labels: map[string]string{"app": "plain"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	pod, err := c.CoreV1().Pods(ns).Create(ctx, in, metav1.CreateOptions{})
	require.NoError(t, err, "unlabelled Pod refused while the webhook is down")
	require.Empty(t, pod.Spec.InitContainers, "unlabelled Pod changed")
	require.Equal(t, corev1.DefaultSchedulerName, pod.Spec.SchedulerName, "unlabelled Pod changed")
	require.Empty(t, pod.Annotations, "unlabelled Pod changed")
	require.Empty(t, pod.Spec.SchedulingGates, "unlabelled Pod changed")
	_, err = c.CoreV1().Pods(ns).Create(ctx, gpuPod("labelled", "g1.1"), metav1.CreateOptions{})
	require.ErrorContains(t, err, "gpu-spec.runplane.io", "labelled Pod while the webhook is down: want a webhook failure")
}

// Admission is offered over HTTP/2, as controller-runtime's webhook server
// offers it: the API server sends concurrent calls over one connection
// rather than a TLS handshake each.
func TestAdmissionOverHTTP2(t *testing.T) {
	r := startWebhook(t)
	require.Equal(t, "h2", servedProtocol(t, r.addr))
}

// A serving certificate close to expiry is renewed by the running webhook
// and served without a restart; the API server keeps trusting it.
func TestServingCertificateRotates(t *testing.T) {
	r := startWebhook(t, func(c *webhook.Config) {
		c.TLS.SecretName = "runplane-webhook-tls-rotating"
		c.TLS.CheckInterval.Duration = 500 * time.Millisecond
		c.Certs = pki.Options{CertValidity: time.Hour + 40*time.Second, RenewBefore: time.Hour + 30*time.Second}
	})
	first := servedCert(t, r.addr)
	require.Eventually(t, func() bool { return !bytes.Equal(servedCert(t, r.addr), first) }, 30*time.Second, 200*time.Millisecond,
		"a renewed serving certificate")
	ns := env.Namespace(t, "team-rotate")
	_, err := env.Client().CoreV1().Pods(ns).Create(context.Background(), gpuPod("after-rotation", "g1.1"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err, "admission after rotation")
}

// With -cert-manager the webhook serves the files cert-manager keeps (the
// configurations carry cert-manager's CA, which the webhook leaves alone)
// and follows a renewal without a restart.
func TestCertManagerFilesFollowed(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA("cert-manager-ca", time.Now(), time.Hour)
	require.NoError(t, err)
	issue := func() {
		certPEM, keyPEM, err := ca.Issue(pki.Serving("runplane-webhook", []string{"127.0.0.1"}, time.Hour), time.Now())
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.key"), keyPEM, 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600))
	}
	issue()
	c := env.Client()
	ctx := context.Background()
	r := startWebhook(t, func(cfg *webhook.Config) {
		cfg.TLS = config.TLS{CertManager: true, CertDir: dir}
		// What the chart and cert-manager's CA injector would write.
		m, v := webhook.Configurations(webhook.ConfigurationOptions{Namespace: runplaneNS, URL: cfg.Webhooks.URL, CABundle: ca.CertPEM})
		for _, err := range []error{
			c.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, m.Name, metav1.DeleteOptions{}),
			c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, v.Name, metav1.DeleteOptions{}),
		} {
			if !apierrors.IsNotFound(err) {
				require.NoError(t, err)
			}
		}
		_, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = c.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{})
		require.NoError(t, err)
	})
	first := servedCert(t, r.addr)
	issue()
	require.Eventually(t, func() bool { return !bytes.Equal(servedCert(t, r.addr), first) }, 30*time.Second, 200*time.Millisecond,
		"the renewed certificate served")
	_, err = c.CoreV1().Pods(env.Namespace(t, "team-cert-manager")).Create(ctx, gpuPod("after-renewal", "g1.1"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err, "admission after the renewal")
}

// With a NATS server name, a pool Pod's sidecar gets it and the CA bundle
// the ConfigMap in runplane's namespace holds at the Pod's admission (the
// queue publishes it); before it exists a pool Pod is refused with the
// reason, and a renewed bundle reaches the next Pods.
func TestPoolPodsGetNATSCA(t *testing.T) {
	startWebhook(t, func(c *webhook.Config) { c.Injection.NATSServerName = "runplane-nats.runplane-system.svc" })
	c := env.Client()
	ctx := context.Background()
	ns := env.Namespace(t, "team-nats-ca")
	t.Cleanup(func() { _ = c.CoreV1().ConfigMaps(runplaneNS).Delete(ctx, api.NATSCAConfigMap, metav1.DeleteOptions{}) })
	pool := func() *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "w", Labels: map[string]string{api.LabelPool: "echo"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "example.com/app:1"}}}}
	}
	_, err := c.CoreV1().Pods(ns).Create(ctx, pool(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.ErrorContains(t, err, "runplane's NATS CA is not published yet")

	for _, names := range [][]string{{"first"}, {"renewed", "first"}} {
		var bundle []byte
		for _, n := range names {
			ca, err := pki.NewCA(n, time.Now(), time.Hour)
			require.NoError(t, err)
			bundle = append(bundle, ca.CertPEM...)
		}
		require.NoError(t, natstls.PublishCA(ctx, c, runplaneNS, bundle, nil))
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			pod, err := c.CoreV1().Pods(ns).Create(ctx, pool(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			require.NoError(ct, err)
			var sidecar *corev1.Container
			for i := range pod.Spec.InitContainers {
				if pod.Spec.InitContainers[i].Name == api.SidecarContainerName {
					sidecar = &pod.Spec.InitContainers[i]
				}
			}
			require.NotNil(ct, sidecar)
			require.Equal(ct, string(bundle), envOf(*sidecar, api.EnvNATSCA))
			require.Equal(ct, "runplane-nats.runplane-system.svc", envOf(*sidecar, api.EnvNATSServerName))
		}, 30*time.Second, 200*time.Millisecond)
	}
}
