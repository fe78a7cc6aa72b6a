package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

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
	"github.com/runplane/runplane/webhook"
	"github.com/runplane/runplane/webhook/certs"
	"github.com/runplane/runplane/webhook/mutate"
)

// A Deployment's Pods (created by the ReplicaSet controller with
// generateName) carry everything the webhook injects; and the stored,
// API-defaulted Pod mutated again changes nothing but the injected
// annotation, so reinvocation is a no-op against real defaulting too.
func TestDeploymentPodsAreInjected(t *testing.T) {
	startWebhook(t)
	c := env.Client()
	ns := namespace(t, "team-deploy")
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
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "framework", Image: "example.com/llm:1"}}},
			},
		},
	}
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	waitFor(t, "2 Pods of the Deployment", 60*time.Second, func() (bool, error) {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=llm"})
		if err != nil {
			return false, err
		}
		pods = list.Items
		return len(pods) == 2, nil
	})
	for _, p := range pods {
		if !strings.HasPrefix(p.GenerateName, "llm-") {
			t.Errorf("Pod %s: not created with generateName", p.Name)
		}
		if got := names(p.Spec.InitContainers); got != "runplane-worker,runplane-ssh-install,runplane-ssh" {
			t.Errorf("Pod %s init containers %s", p.Name, got)
		}
		main := p.Spec.Containers[0]
		// The SSH sidecar runs from the user's image, so sessions get its shell.
		if ssh := p.Spec.InitContainers[2]; ssh.Image != main.Image {
			t.Errorf("Pod %s: SSH sidecar image %q, want the main image %q", p.Name, ssh.Image, main.Image)
		}
		if q := main.Resources.Limits[api.DefaultGPUResource]; q.Cmp(resource.MustParse("1")) != 0 {
			t.Errorf("Pod %s GPU limit %s", p.Name, q.String())
		}
		if p.Spec.SchedulerName != api.SchedulerName || p.Spec.PriorityClassName != api.PriorityClassWorkload || ptr.Deref(p.Spec.Priority, 0) != 1000 {
			t.Errorf("Pod %s scheduler %q class %q priority %v", p.Name, p.Spec.SchedulerName, p.Spec.PriorityClassName, p.Spec.Priority)
		}
		if p.Labels[api.LabelEgress] != api.EgressRestricted || !strings.HasPrefix(p.Annotations[api.AnnotationInjected], "gpu-spec,pool,ssh hash=") {
			t.Errorf("Pod %s labels %v annotations %v", p.Name, p.Labels, p.Annotations)
		}
		sc := p.Spec.InitContainers[0]
		if env := envOf(sc, api.EnvConcurrency); env != "3" {
			t.Errorf("sidecar concurrency %q", env)
		}
		for _, m := range main.VolumeMounts {
			if m.Name == mutate.VolumeNATSCredentials || m.Name == mutate.VolumeSSHAuthorizedKey {
				t.Errorf("main container mounts %s", m.Name)
			}
		}

		// Reinvocation against the real, defaulted object.
		again := p.DeepCopy()
		delete(again.Annotations, api.AnnotationInjected)
		res, err := testMutator(t).Mutate(ctx, again, ns)
		if err != nil {
			t.Fatal(err)
		}
		delete(res.Pod.Annotations, api.AnnotationInjected)
		if patch, err := webhook.Patch(again, res.Pod); err != nil || patch != nil {
			t.Errorf("mutating the stored Pod again changes it (defaults missing from injected objects?): %s %v", patch, err)
		}
	}
}

// testMutator mirrors the injection config of startWebhook, with the real
// cluster's PriorityClass value.
func testMutator(t *testing.T) *mutate.Mutator {
	cat, err := catalog.Parse(map[string]string{"g1.1": "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\n"})
	if err != nil {
		t.Fatal(err)
	}
	return &mutate.Mutator{
		Config: mutate.Config{Image: "runplane:e2e", PauseImage: "registry.k8s.io/pause:3.10", NATSURL: "nats://127.0.0.1:4222",
			SubjectPrefix: api.DefaultSubjectPrefix, StreamName: api.DefaultStreamName},
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
	ns := namespace(t, "team-deny")
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
			if err == nil {
				t.Fatalf("kubectl apply succeeded: %s", out)
			}
			if !strings.Contains(out, tt.want) {
				t.Fatalf("kubectl said:\n%s\nwant it to contain:\n%s", out, tt.want)
			}
			t.Logf("kubectl: %s", strings.TrimSpace(out))
		})
	}
}

// A server-side dry-run shows the mutated Pod and stores nothing.
func TestServerSideDryRun(t *testing.T) {
	startWebhook(t)
	ns := namespace(t, "team-dryrun")
	out, err := kubectl(t, `
apiVersion: v1
kind: Pod
metadata: {name: worker, labels: {runplane.io/pool: echo}}
spec: {containers: [{name: framework, image: example.com/echo:1}]}`, "apply", "-n", ns, "--dry-run=server", "-o", "json", "-f", "-")
	if err != nil {
		t.Fatalf("kubectl: %v\n%s", err, out)
	}
	var pod corev1.Pod
	if err := json.Unmarshal([]byte(out), &pod); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if names(pod.Spec.InitContainers) != api.SidecarContainerName || envOf(pod.Spec.Containers[0], api.EnvPool) != "echo" {
		t.Fatalf("dry-run Pod not mutated: %s", out)
	}
	if _, err := env.Client().CoreV1().Pods(ns).Get(context.Background(), "worker", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("dry-run stored the Pod: %v", err)
	}
}

// A spec added to the catalog ConfigMap is used without a restart.
func TestCatalogChangeFollowed(t *testing.T) {
	startWebhook(t)
	c := env.Client()
	ctx := context.Background()
	ns := namespace(t, "team-catalog")
	cm, err := c.CoreV1().ConfigMaps(runplaneNS).Get(ctx, api.CatalogConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["g2.new"] = "gpu: 2\ncpu: \"16\"\nmemory: 64Gi\n"
	if _, err := c.CoreV1().ConfigMaps(runplaneNS).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new spec to be admitted", 30*time.Second, func() (bool, error) {
		pod, err := c.CoreV1().Pods(ns).Create(ctx, gpuPod("new-spec", "g2.new"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		q := pod.Spec.Containers[0].Resources.Limits[api.DefaultGPUResource]
		return q.Cmp(resource.MustParse("2")) == 0, nil
	})
}

// A Pod mounting a claim still being prepared is gated; one mounting only
// ready claims is admitted unchanged; claims' status writes by runplane's
// controllers pass validation.
func TestStorageGate(t *testing.T) {
	startWebhook(t)
	c := env.Client()
	ctx := context.Background()
	ns := namespace(t, "team-storage")
	mk := func(name string, a map[string]string) {
		t.Helper()
		_, err := c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: a},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
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
	if err != nil {
		t.Fatal(err)
	}
	if len(gated.Spec.SchedulingGates) != 1 || gated.Spec.SchedulingGates[0].Name != api.SchedulingGateStorage {
		t.Fatalf("gates %v", gated.Spec.SchedulingGates)
	}
	plain, err := c.CoreV1().Pods(ns).Create(ctx, pod("plain-reader", "plain"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.Spec.SchedulingGates) != 0 || plain.Annotations[api.AnnotationInjected] != "" {
		t.Fatalf("plain claim Pod changed: gates %v annotations %v", plain.Spec.SchedulingGates, plain.Annotations)
	}

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
	if err != nil {
		t.Fatalf("status write refused: %v", err)
	}
	waitFor(t, "an ungated Pod after preparation", 20*time.Second, func() (bool, error) {
		p, err := c.CoreV1().Pods(ns).Create(ctx, pod("reader-2", "model"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && len(p.Spec.SchedulingGates) == 0, err
	})
}

// The TLS material lives in a Secret, survives a restart, and the caBundle
// is repaired when someone changes it.
func TestCertificateSecretAndCABundleDrift(t *testing.T) {
	r := startWebhook(t)
	c := env.Client()
	ctx := context.Background()
	sec, err := c.CoreV1().Secrets(runplaneNS).Get(ctx, "runplane-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bundle := sec.Data[certs.KeyCABundle]
	mwc, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhook.DefaultConfigurationName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range mwc.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, bundle) {
			t.Fatalf("webhook %s caBundle differs from the Secret's", w.Name)
		}
	}

	// Drift: another CA in every entry; the watch repairs it.
	other, err := certs.Renew(nil, certs.Options{DNSNames: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range mwc.Webhooks {
		mwc.Webhooks[i].ClientConfig.CABundle = other.CABundle
	}
	if _, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, mwc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the caBundle to be repaired", 20*time.Second, func() (bool, error) {
		m, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, webhook.DefaultConfigurationName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, w := range m.Webhooks {
			if !bytes.Equal(w.ClientConfig.CABundle, bundle) {
				return false, nil
			}
		}
		return true, nil
	})

	// Restart: the same CA is loaded, not a new one.
	r.stop()
	startWebhook(t)
	sec2, err := c.CoreV1().Secrets(runplaneNS).Get(ctx, "runplane-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sec2.Data[certs.KeyCABundle], bundle) || !bytes.Equal(sec2.Data[corev1.TLSCertKey], sec.Data[corev1.TLSCertKey]) {
		t.Fatal("restart replaced the CA or serving certificate")
	}
}

// Unlabelled Pods never reach the webhook: they are admitted unchanged even
// while it is down, while labelled Pods are refused (failurePolicy Fail).
func TestUnlabelledPodAdmittedWhileWebhookDown(t *testing.T) {
	r := startWebhook(t)
	r.stop()
	c := env.Client()
	ctx := context.Background()
	ns := namespace(t, "team-down")
	in := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plain", Labels: map[string]string{"app": "plain"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	pod, err := c.CoreV1().Pods(ns).Create(ctx, in, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("unlabelled Pod refused while the webhook is down: %v", err)
	}
	if len(pod.Spec.InitContainers) != 0 || pod.Spec.SchedulerName != corev1.DefaultSchedulerName || len(pod.Annotations) != 0 || len(pod.Spec.SchedulingGates) != 0 {
		t.Fatalf("unlabelled Pod changed: %+v", pod.Spec)
	}
	_, err = c.CoreV1().Pods(ns).Create(ctx, gpuPod("labelled", "g1.1"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "gpu-spec.runplane.io") {
		t.Fatalf("labelled Pod while the webhook is down: want a webhook failure, got %v", err)
	}
}

// A serving certificate close to expiry is renewed by the running webhook
// and served without a restart; the API server keeps trusting it.
func TestServingCertificateRotates(t *testing.T) {
	r := startWebhook(t, func(c *webhook.Config) {
		c.TLS.SecretName = "runplane-webhook-tls-rotating"
		c.TLS.CheckInterval = 500 * time.Millisecond
		c.TLS.Certs = certs.Options{CertValidity: time.Hour + 40*time.Second, RenewBefore: time.Hour + 30*time.Second}
	})
	first := servedCert(t, r.addr)
	waitFor(t, "a renewed serving certificate", 30*time.Second, func() (bool, error) {
		return !bytes.Equal(servedCert(t, r.addr), first), nil
	})
	ns := namespace(t, "team-rotate")
	if _, err := env.Client().CoreV1().Pods(ns).Create(context.Background(), gpuPod("after-rotation", "g1.1"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("admission after rotation: %v", err)
	}
}
