package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/webhook"
	"github.com/runplane/runplane/webhook/mutate"
)

// These tests act as a hostile tenant ("mallory", who may do anything to
// Pods, Jobs and claims of its own namespace) against the real API server
// with the webhook and runplane's admission policies registered.

const tenantUser = "mallory"

// runplaneSecret is a name of runplane's (runplane-*): the NATS credentials
// Secret the probe found in tenant namespaces.
const runplaneSecret = "runplane-nats-credentials"

// controllerUser is runplane's controller ServiceAccount.
var controllerUser = "system:serviceaccount:" + runplaneNS + ":runplane-controller"

// as is a client that impersonates user (the admin kubeconfig may).
func as(t *testing.T, user string, groups ...string) kubernetes.Interface {
	t.Helper()
	cfg := env.RESTConfig()
	cfg.Impersonate.UserName = user
	cfg.Impersonate.Groups = append([]string{"system:authenticated"}, groups...)
	c, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return c
}

// tenantNamespace creates ns and lets the tenant (and runplane's
// controller) work in it.
func tenantNamespace(t *testing.T, ns string) string {
	t.Helper()
	env.Namespace(t, ns)
	ctx := context.Background()
	c := env.Client()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "pods/ephemeralcontainers", "persistentvolumeclaims", "secrets"}, Verbs: []string{"*"}},
			{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"*"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"*"}},
		},
	}
	if _, err := c.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "tenant"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: tenantUser},
			{Kind: "ServiceAccount", Namespace: runplaneNS, Name: "runplane-controller"}},
	}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	// The authorizer follows RBAC objects through a watch: wait until the
	// grants are in effect.
	for _, user := range []string{tenantUser, controllerUser} {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			sar, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "update", Resource: "pods", Subresource: "ephemeralcontainers"},
			}}, metav1.CreateOptions{})
			require.NoError(ct, err)
			require.True(ct, sar.Status.Allowed, "%s may not work in %s yet", user, ns)
		}, 30*time.Second, 100*time.Millisecond)
	}
	return ns
}

// waitPolicies waits until the API server enforces runplane's admission
// policies on Pods (it picks up policies and bindings asynchronously, each
// on its own); a test of another policy waits for that one itself
// (claimsRole, TestNATSTokensOnlyFromTheKubelet).
func waitPolicies(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	mallory := as(t, tenantUser)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	_, err := mallory.CoreV1().Pods(ns).Create(ctx, plainPod("policy-probe"), metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{api.LabelSSH: api.SSHEnabled}}})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := mallory.CoreV1().Pods(ns).Create(ctx, plainPod("gpu-probe", func(p *corev1.Pod) {
			p.Spec.PriorityClassName = api.PriorityClassWorkload
		}), dryRun)
		require.Error(c, err, "policy runplane-gpu not enforced")
		_, err = mallory.CoreV1().Pods(ns).Create(ctx, plainPod("managed-probe", labelled(map[string]string{api.LabelManagedBy: api.ManagedByController}, nil)), dryRun)
		require.Error(c, err, "policy runplane-managed-by not enforced")
		_, err = mallory.CoreV1().Pods(ns).Patch(ctx, "policy-probe", types.MergePatchType, body, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		require.Error(c, err, "policy runplane-pod-keys not enforced")
	}, 30*time.Second, 200*time.Millisecond)
}

func plainPod(name string, modify ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "example.com/app:1"}}},
	}
	for _, m := range modify {
		m(p)
	}
	return p
}

func labelled(labels map[string]string, annotations map[string]string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Labels, p.Annotations = labels, annotations }
}

// dryRunMarker is the injected annotation a dry-run shows anyone.
func dryRunMarker(t *testing.T, ns string, pod *corev1.Pod) string {
	t.Helper()
	out, err := as(t, tenantUser).CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err)
	v := out.Annotations[api.AnnotationInjected]
	require.NotEmpty(t, v, "dry-run shows the marker")
	return v
}

// A marker read off a dry-run and copied onto a Pod skips nothing: the GPU
// Pod is still mutated (scheduler, resources, PriorityClass) or denied, and
// a pool Pod mounting the NATS credentials is still denied.
func TestForgedMarkerSkipsNothing(t *testing.T) {
	startWebhook(t)
	ns := tenantNamespace(t, "team-forge")
	ctx := context.Background()
	mallory := as(t, tenantUser)

	gpuMarker := dryRunMarker(t, ns, gpuPod("probe", "g1.1"))
	forged := gpuPod("forged-gpu", "g1.1")
	forged.Annotations = map[string]string{api.AnnotationInjected: gpuMarker}
	forged.Spec.SchedulerName = corev1.DefaultSchedulerName
	got, err := mallory.CoreV1().Pods(ns).Create(ctx, forged, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, api.SchedulerName, got.Spec.SchedulerName, "a forged marker kept the default scheduler")
	assert.Equal(t, api.PriorityClassWorkload, got.Spec.PriorityClassName)
	q := got.Spec.Containers[0].Resources.Limits[api.DefaultGPUResource]
	assert.Zero(t, q.Cmp(resource.MustParse("1")), "GPU limit %s", q.String())

	six := gpuPod("forged-six", "g1.1")
	six.Annotations = map[string]string{api.AnnotationInjected: gpuMarker}
	six.Spec.SchedulerName = corev1.DefaultSchedulerName
	six.Spec.Containers[0].Resources.Limits = corev1.ResourceList{api.DefaultGPUResource: resource.MustParse("6")}
	_, err = mallory.CoreV1().Pods(ns).Create(ctx, six, metav1.CreateOptions{})
	require.Error(t, err, "6 GPUs admitted under a forged marker")
	assert.Contains(t, err.Error(), `the container asks for 6 but GPU spec "g1.1" gives 1`)

	poolMarker := dryRunMarker(t, ns, plainPod("probe", labelled(map[string]string{api.LabelPool: "echo"}, nil)))
	creds := plainPod("forged-pool", labelled(map[string]string{api.LabelPool: "echo"}, map[string]string{api.AnnotationInjected: poolMarker}), func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: runplaneSecret}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "creds", MountPath: "/creds"}}
	})
	_, err = mallory.CoreV1().Pods(ns).Create(ctx, creds, metav1.CreateOptions{})
	require.Error(t, err, "a pool Pod mounting the credentials admitted under a forged marker")
	assert.Contains(t, err.Error(), `container "main"`)
	assert.Contains(t, err.Error(), `volume "creds"`)
}

// Neither runplane's managed-by label nor a forged marker lifts the
// storage gate from a tenant's Pod; a tenant cannot put the label on a Job
// or a Pod; runplane's own Job (created by the controller's ServiceAccount)
// runs ungated.
func TestStorageGateNotSkippedByLabels(t *testing.T) {
	startWebhook(t)
	ns := tenantNamespace(t, "team-gate")
	waitPolicies(t, ns)
	ctx := context.Background()
	mallory := as(t, tenantUser)
	_, err := mallory.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "model", Annotations: map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	mounting := func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "model"}}}}
	}
	marker := dryRunMarker(t, ns, plainPod("probe", mounting))
	managed := map[string]string{api.LabelManagedBy: api.ManagedByController}

	// Without the label (the tenant may not set it), a forged marker does
	// not lift the gate.
	got, err := mallory.CoreV1().Pods(ns).Create(ctx, plainPod("forged-marker", mounting, labelled(nil, map[string]string{api.AnnotationInjected: marker})), metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, []corev1.PodSchedulingGate{{Name: api.SchedulingGateStorage}}, got.Spec.SchedulingGates, "a forged marker lifted the storage gate")

	_, err = mallory.CoreV1().Pods(ns).Create(ctx, plainPod("forged-label", mounting, labelled(managed, nil)), metav1.CreateOptions{})
	require.Error(t, err, "a tenant's Pod with runplane's managed-by label admitted")
	assert.Contains(t, err.Error(), api.LabelManagedBy)

	job := func(name string) *batchv1.Job {
		return &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: managed},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: managed},
				Spec:       plainPod("", mounting, func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever }).Spec,
			}},
		}
	}
	_, err = mallory.BatchV1().Jobs(ns).Create(ctx, job("forged-job"), metav1.CreateOptions{})
	require.Error(t, err, "a tenant's Job with runplane's managed-by label admitted")
	assert.Contains(t, err.Error(), api.LabelManagedBy)

	// runplane's own: the Job controller's Pod is not gated.
	_, err = as(t, controllerUser, "system:serviceaccounts").BatchV1().Jobs(ns).Create(ctx, job("prepare-model-1"), metav1.CreateOptions{})
	require.NoError(t, err, "runplane's controller creates its prepare Job")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pods, err := env.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=prepare-model-1"})
		require.NoError(c, err)
		require.Len(c, pods.Items, 1)
		require.Empty(c, pods.Items[0].Spec.SchedulingGates, "runplane's own prepare Pod gated")
	}, 30*time.Second, 200*time.Millisecond)

	// A tenant may not rewrite runplane's Job either.
	err = patchLabels(mallory, ns, "prepare-model-1", "jobs", map[string]any{"extra": "x"}, nil)
	require.Error(t, err, "a tenant changed runplane's Job")
}

// retryUpdate gets the Pod, changes it and updates it, retrying on a
// write conflict.
func retryUpdate(c kubernetes.Interface, ns, name string, change func(*corev1.Pod)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := c.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(p)
		_, err = c.CoreV1().Pods(ns).Update(context.Background(), p, metav1.UpdateOptions{})
		return err
	})
}

func patchLabels(c kubernetes.Interface, ns, name, resource string, labels, annotations map[string]any) error {
	meta := map[string]any{}
	if labels != nil {
		meta["labels"] = labels
	}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	ctx := context.Background()
	switch resource {
	case "jobs":
		_, err = c.BatchV1().Jobs(ns).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
	default:
		_, err = c.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
	}
	return err
}

// A Pod's runplane.io/ labels and annotations cannot be changed after
// creation by the tenant: adding SSH publication to any Pod, or taking a
// pool Pod out of its egress policy; nor the image of runplane's sidecar,
// nor the storage gate; runplane's controller still writes.
func TestRunplaneKeysImmutableAfterCreation(t *testing.T) {
	startWebhook(t)
	ns := tenantNamespace(t, "team-update")
	waitPolicies(t, ns)
	ctx := context.Background()
	mallory := as(t, tenantUser)
	_, err := mallory.CoreV1().Pods(ns).Create(ctx, plainPod("plain"), metav1.CreateOptions{})
	require.NoError(t, err)
	pool, err := mallory.CoreV1().Pods(ns).Create(ctx, plainPod("worker", labelled(map[string]string{api.LabelPool: "echo"}, nil)), metav1.CreateOptions{})
	require.NoError(t, err)
	require.Equal(t, api.EgressRestricted, pool.Labels[api.LabelEgress])

	tests := []struct {
		name, pod           string
		labels, annotations map[string]any
		want                string
	}{
		{"publish SSH later", "plain", map[string]any{api.LabelSSH: api.SSHEnabled},
			map[string]any{api.AnnotationSSHServiceType: "LoadBalancer", api.AnnotationSSHAuthorizedKeys: "keys"}, "label " + api.LabelSSH},
		{"leave the egress policy", "worker", map[string]any{api.LabelEgress: nil}, nil, "label " + api.LabelEgress},
		{"rewrite the marker", "worker", nil, map[string]any{api.AnnotationInjected: "forged"}, "annotation " + api.AnnotationInjected},
		{"join another pool", "worker", map[string]any{api.LabelPool: "other"}, nil, "label " + api.LabelPool},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := patchLabels(mallory, ns, tt.pod, "pods", tt.labels, tt.annotations)
			require.Error(t, err, "the tenant changed runplane's keys")
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	require.NoError(t, patchLabels(mallory, ns, "worker", "pods", map[string]any{"app": "mine"}, nil), "other labels stay the tenant's")

	// runplane's sidecar keeps its image.
	err = retryUpdate(mallory, ns, "worker", func(p *corev1.Pod) { p.Spec.InitContainers[0].Image = "example.com/evil:1" })
	require.Error(t, err, "the tenant replaced the sidecar's image")
	assert.Contains(t, err.Error(), "keep their image; changed: "+api.SidecarContainerName)

	// The storage gate is runplane's to lift.
	gated, err := mallory.CoreV1().Pods(ns).Create(ctx, plainPod("gated", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "not-yet"}}}}
	}), metav1.CreateOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, gated.Spec.SchedulingGates, "a Pod on a missing claim is gated")
	err = retryUpdate(mallory, ns, "gated", func(p *corev1.Pod) { p.Spec.SchedulingGates = nil })
	require.Error(t, err, "the tenant lifted the storage gate")
	assert.Contains(t, err.Error(), "scheduling gate "+api.SchedulingGateStorage)
	require.NoError(t, patchLabels(as(t, controllerUser, "system:serviceaccounts"), ns, "plain", "pods", nil,
		map[string]any{api.AnnotationSSHEndpoint: "10.0.0.1:22"}), "runplane's controller writes its keys")
}

// kubectl debug cannot give an ephemeral container what the Pod's own
// containers may not have: runplane's volumes, its Secrets, its names.
func TestEphemeralContainersChecked(t *testing.T) {
	startWebhook(t)
	ns := tenantNamespace(t, "team-debug")
	ctx := context.Background()
	mallory := as(t, tenantUser)
	worker, err := mallory.CoreV1().Pods(ns).Create(ctx, plainPod("worker", labelled(map[string]string{api.LabelPool: "echo"}, nil)), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = mallory.CoreV1().Pods(ns).Create(ctx, plainPod("plain"), metav1.CreateOptions{})
	require.NoError(t, err)
	// The sidecar's NATS credential volume.
	credVolume := mutate.VolumeNATSCredentials
	require.True(t, slices.ContainsFunc(worker.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == credVolume }), "the sidecar's credential volume")

	// kwok writes the Pods' status meanwhile: a conflict is retried.
	debug := func(pod, name string, modify func(*corev1.EphemeralContainer)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := mallory.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
			if err != nil {
				return err
			}
			ec := corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: name, Image: "busybox:1.36", TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent}}
			if modify != nil {
				modify(&ec)
			}
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, ec)
			_, err = mallory.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, pod, p, metav1.UpdateOptions{})
			return err
		})
	}
	tests := []struct {
		name, pod, container string
		modify               func(*corev1.EphemeralContainer)
		want                 string
	}{
		{"mounts the NATS credentials", "worker", "dbg1", func(c *corev1.EphemeralContainer) {
			c.VolumeMounts = []corev1.VolumeMount{{Name: credVolume, MountPath: "/creds"}}
		}, `container "dbg1" (spec.ephemeralContainers[0])`},
		{"env from runplane's Secret", "plain", "dbg2", func(c *corev1.EphemeralContainer) {
			c.Env = []corev1.EnvVar{{Name: "T", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: runplaneSecret}, Key: "token"}}}}
		}, `env "T" takes valueFrom.secretKeyRef`},
		{"envFrom runplane's Secret", "plain", "dbg3", func(c *corev1.EphemeralContainer) {
			// A prefix no GPU device variable starts with: without one, policy
			// runplane-gpu (which runs before validating webhooks) refuses it first.
			c.EnvFrom = []corev1.EnvFromSource{{Prefix: "T_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: runplaneSecret}}}}
		}, "envFrom secretRef"},
		{"a reserved name", "worker", "runplane-worker-2", nil, `container name "runplane-worker-2"`},
		{"targets the worker sidecar", "worker", "dbg4", func(c *corev1.EphemeralContainer) {
			c.TargetContainerName = api.SidecarContainerName
		}, `targets runplane's container "runplane-worker"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := debug(tt.pod, tt.container, tt.modify)
			require.Error(t, err, "ephemeral container admitted")
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	require.NoError(t, debug("worker", "dbg-ok", nil), "a plain debug container")
}

// A container named like an injected one is denied, not merged: a
// pre-declared runplane-worker that would lay the tenant's claim over the
// SSH binary directory.
func TestReservedContainerNamesDenied(t *testing.T) {
	startWebhook(t)
	ns := tenantNamespace(t, "team-reserved")
	mallory := as(t, tenantUser)
	pod := plainPod("sd-0", labelled(map[string]string{api.LabelPool: "echo", api.LabelSSH: api.SSHEnabled},
		map[string]string{api.AnnotationSSHAuthorizedKeys: "keys"}), func(p *corev1.Pod) {
		p.Spec.Containers[0].Command = []string{"app"} // SSH runs in front of it
		p.Spec.InitContainers = []corev1.Container{{Name: "runplane-worker", Image: "example.com/evil:1",
			VolumeMounts: []corev1.VolumeMount{{Name: "mine", MountPath: "/var/run/runplane/ssh-bin"}}}}
		p.Spec.Volumes = []corev1.Volume{{Name: "mine", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	})
	_, err := mallory.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	require.Error(t, err, "a pre-declared runplane-worker admitted")
	assert.Contains(t, err.Error(), `container name "runplane-worker"`)
	assert.Contains(t, err.Error(), "reserved")
}

// No user container reaches runplane's credentials by any route, in a
// runplane Pod or in an unlabelled one.
func TestCredentialRoutesDenied(t *testing.T) {
	startWebhook(t)
	ns := tenantNamespace(t, "team-creds")
	mallory := as(t, tenantUser)
	secret := corev1.LocalObjectReference{Name: runplaneSecret}
	mount := func(v corev1.VolumeSource) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: v}}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "v", MountPath: "/v"}}
		}
	}
	routes := []struct {
		name   string
		modify func(*corev1.Pod)
		want   string
	}{
		{"projected secret", mount(corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{Secret: &corev1.SecretProjection{LocalObjectReference: secret}}}}}), "a projected volume of runplane's Secret"},
		{"NATS audience token", mount(corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "nats.runplane.io", Path: "token", ExpirationSeconds: ptr.To(int64(3600))}}}}}),
			"a projected ServiceAccount token for runplane's NATS audience"},
		{"env secretKeyRef", func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "T", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: secret, Key: "token"}}}}
		}, "valueFrom.secretKeyRef"},
		{"envFrom secretRef", func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: secret}}}
		}, "envFrom secretRef"},
	}
	for _, kind := range []struct {
		name   string
		labels map[string]string
	}{{"pool", map[string]string{api.LabelPool: "echo"}}, {"unlabelled", nil}} {
		for _, r := range routes {
			t.Run(kind.name+"/"+r.name, func(t *testing.T) {
				_, err := mallory.CoreV1().Pods(ns).Create(context.Background(), plainPod("p", labelled(kind.labels, nil), r.modify),
					metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				require.Error(t, err, "credentials reachable")
				assert.Contains(t, err.Error(), `container "main"`)
				assert.Contains(t, err.Error(), r.want)
			})
		}
	}
}

// stockNS is the platform's stock namespace of the tests' webhook.
const stockNS = "platform-stock"

// draSpec is the catalog's DRA spec (its devices from a claim).
const draSpec = "h100.1"

// Stock placeholders live in the platform's namespace only: a tenant's
// would hold GPUs as stock, with runplane-stock, on the tenant's say. In a
// tenant namespace the platform keeps DRA stock in (injection.draStockNamespaces:
// a DRA placeholder's claim goes only to a GPU Pod of its own namespace),
// placeholders of DRA specs are admitted, and of no other spec.
func TestStockOnlyInThePlatformNamespace(t *testing.T) {
	const draStockNS = "team-dra-stock"
	startWebhook(t, func(c *webhook.Config) { c.Injection.DRAStockNamespaces = []string{draStockNS} })
	ns := tenantNamespace(t, "team-stock")
	placeholder := plainPod("ph", labelled(map[string]string{api.LabelStock: "g1.1"}, nil))
	draPlaceholder := plainPod("ph", labelled(map[string]string{api.LabelStock: draSpec}, nil))
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	tenant := as(t, tenantUser)
	_, err := tenant.CoreV1().Pods(ns).Create(context.Background(), placeholder, dry)
	require.Error(t, err, "a tenant's stock placeholder")
	assert.Contains(t, err.Error(), `label runplane.io/stock: stock placeholders may only be created in namespace(s) platform-stock (the platform's), not in "team-stock"`)
	_, err = tenant.CoreV1().Pods(ns).Create(context.Background(), draPlaceholder, dry)
	require.Error(t, err, "a tenant's DRA placeholder outside the DRA stock namespaces")
	assert.Contains(t, err.Error(), `not in "team-stock"`)
	env.Namespace(t, stockNS)
	_, err = env.Client().CoreV1().Pods(stockNS).Create(context.Background(), placeholder, dry)
	require.NoError(t, err, "a placeholder in the stock namespace")

	draNS := tenantNamespace(t, draStockNS)
	got, err := tenant.CoreV1().Pods(draNS).Create(context.Background(), draPlaceholder, dry)
	require.NoError(t, err, "a DRA placeholder in a DRA stock namespace")
	assert.Equal(t, api.PriorityClassStock, got.Spec.PriorityClassName)
	require.Len(t, got.Spec.ResourceClaims, 1, "the placeholder holds its claim")
	assert.Equal(t, catalog.ClaimTemplateName(draSpec), ptr.Deref(got.Spec.ResourceClaims[0].ResourceClaimTemplateName, ""))
	_, err = tenant.CoreV1().Pods(draNS).Create(context.Background(), placeholder, dry)
	require.Error(t, err, "an extended-resource placeholder in a DRA stock namespace")
	assert.Contains(t, err.Error(), `label runplane.io/stock: namespace "team-dra-stock" holds stock of DRA specs only, and "g1.1" is not one`)
}

// A pool Pod may not share one process namespace: every container could
// read the sidecar's NATS token through /proc/<pid>/root.
func TestPoolPodSharesNoProcessNamespace(t *testing.T) {
	startWebhook(t)
	ns := tenantNamespace(t, "team-pid")
	mallory := as(t, tenantUser)
	_, err := mallory.CoreV1().Pods(ns).Create(context.Background(), plainPod("p", labelled(map[string]string{api.LabelPool: "echo"}, nil),
		func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = ptr.To(true) }), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.Error(t, err, "a pool Pod sharing its process namespace")
	assert.Contains(t, err.Error(), "spec.shareProcessNamespace")
	got, err := mallory.CoreV1().Pods(ns).Create(context.Background(), plainPod("p", labelled(map[string]string{api.LabelPool: "echo"}, nil)),
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err)
	i := slices.IndexFunc(got.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == api.SidecarContainerName })
	require.GreaterOrEqual(t, i, 0, "the worker sidecar")
	sc := got.Spec.InitContainers[i].SecurityContext
	require.NotNil(t, sc)
	assert.Equal(t, ptr.To(true), sc.RunAsNonRoot, "the sidecar runs as its own user, so the kubelet gives it the token alone")
	assert.NotNil(t, sc.RunAsUser)
}

// A pool Pod cannot re-point the host name its worker sidecar dials (and
// presents its Pod-bound NATS token to): no hostAliases, no resolver or
// search domain of the tenant's. The same Pod without the pool label keeps
// them.
func TestPoolPodCannotRedirectNATS(t *testing.T) {
	startWebhook(t)
	ns := tenantNamespace(t, "team-dns")
	mallory := as(t, tenantUser)
	pool := labelled(map[string]string{api.LabelPool: "echo"}, nil)
	tests := []struct {
		name   string
		modify func(*corev1.Pod)
		want   string
	}{
		{"hostAliases for the NATS host", func(p *corev1.Pod) {
			p.Spec.HostAliases = []corev1.HostAlias{{IP: "10.0.0.66", Hostnames: []string{"runplane-nats.runplane-system.svc.cluster.local"}}}
		}, "label runplane.io/pool: spec.hostAliases: must be empty on a pool Pod"},
		{"dnsPolicy None and the tenant's nameserver", func(p *corev1.Pod) {
			p.Spec.DNSPolicy = corev1.DNSNone
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"10.0.0.66"}}
		}, `label runplane.io/pool: spec.dnsPolicy: is "None"; allowed on a pool Pod: ClusterFirst (the default), ClusterFirstWithHostNet, Default`},
		{"the tenant's nameserver beside the cluster's", func(p *corev1.Pod) {
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"10.0.0.66"}, Options: []corev1.PodDNSConfigOption{{Name: "rotate"}}}
		}, "label runplane.io/pool: spec.dnsConfig.nameservers: must be empty on a pool Pod"},
		{"the tenant's search domain", func(p *corev1.Pod) {
			p.Spec.DNSConfig = &corev1.PodDNSConfig{Searches: []string{"evil.example"}}
		}, "label runplane.io/pool: spec.dnsConfig.searches: must be empty on a pool Pod"},
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := mallory.CoreV1().Pods(ns).Create(context.Background(), plainPod("p", pool, tt.modify), dryRun)
			require.Error(t, err, "a pool Pod re-pointing runplane's host names admitted")
			assert.Contains(t, err.Error(), tt.want)
			_, err = mallory.CoreV1().Pods(ns).Create(context.Background(), plainPod("p", tt.modify), dryRun)
			require.NoError(t, err, "an unlabelled Pod keeps its own resolution")
		})
	}
	_, err := mallory.CoreV1().Pods(ns).Create(context.Background(), plainPod("p", pool, func(p *corev1.Pod) {
		p.Spec.DNSConfig = &corev1.PodDNSConfig{Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}}}
	}), dryRun)
	require.NoError(t, err, "resolver options alone are the pool Pod's")
}

// GPUs and runplane's PriorityClasses only through runplane: an unlabelled
// Pod asking for 8 GPUs and runplane-workload is denied by the policy.
func TestGPUsOnlyThroughRunplane(t *testing.T) {
	startWebhook(t)
	ns := tenantNamespace(t, "team-gpu")
	waitPolicies(t, ns)
	mallory := as(t, tenantUser)
	gpus := func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{api.DefaultGPUResource: resource.MustParse("8")}
	}
	tests := []struct {
		name   string
		modify []func(*corev1.Pod)
		want   string
	}{
		{"8 GPUs and runplane-workload", []func(*corev1.Pod){gpus, func(p *corev1.Pod) { p.Spec.PriorityClassName = api.PriorityClassWorkload }}, "request GPUs"},
		{"GPUs in an init container", []func(*corev1.Pod){func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"nvidia.com/mig-1g.5gb": resource.MustParse("1")}, Limits: corev1.ResourceList{"nvidia.com/mig-1g.5gb": resource.MustParse("1")}}}}
		}}, "container(s) init request GPUs"},
		{"runplane-workload alone", []func(*corev1.Pod){func(p *corev1.Pod) { p.Spec.PriorityClassName = api.PriorityClassWorkload }}, "priorityClassName runplane-workload"},
		{"runplane-stock alone", []func(*corev1.Pod){func(p *corev1.Pod) { p.Spec.PriorityClassName = api.PriorityClassStock }}, "priorityClassName runplane-stock"},
		{"pool Pod with GPUs", []func(*corev1.Pod){gpus, labelled(map[string]string{api.LabelPool: "echo"}, nil)}, "request GPUs"},
		{"every GPU through the toolkit's variable", []func(*corev1.Pod){func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
		}}, "container main sets NVIDIA_VISIBLE_DEVICES"},
		{"a claim from a DRA spec's template", []func(*corev1.Pod){func(p *corev1.Pod) {
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "mine", ResourceClaimTemplateName: ptr.To(catalog.ClaimTemplateName("h100.8"))}}
			p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "mine"}}
		}}, "names a ResourceClaimTemplate runplane-*"},
		{"the variable beside a gpu-spec Pod's GPUs", []func(*corev1.Pod){labelled(map[string]string{api.LabelGPUSpec: "g1.1"}, nil), func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "helper", Image: "busybox", Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "0,1,2,3"}}})
		}}, "container helper sets NVIDIA_VISIBLE_DEVICES"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := mallory.CoreV1().Pods(ns).Create(context.Background(), plainPod("p", tt.modify...), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			require.Error(t, err, "admitted outside runplane")
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	_, err := mallory.CoreV1().Pods(ns).Create(context.Background(), gpuPod("through-runplane", "g1.1"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err, "a gpu-spec Pod")
	_, err = mallory.CoreV1().Pods(ns).Create(context.Background(), plainPod("opt-out", func(p *corev1.Pod) {
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "void"}}
	}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err, "NVIDIA_VISIBLE_DEVICES=void asks for no device")
}

// The NVIDIA container toolkit reads its device variables from the
// container's final environment, however they got there: env[].valueFrom
// (a ConfigMap key, the Pod's own annotation), envFrom (a ConfigMap or
// Secret whose keys admission cannot see and which may change after it),
// an ephemeral container added by kubectl debug. Every route is denied by
// policy runplane-gpu, in an unlabelled Pod as in a gpu-spec one; an
// envFrom that cannot carry a device variable stays admitted.
func TestGPUEnvByEveryRoute(t *testing.T) {
	startWebhook(t)
	ns := tenantNamespace(t, "team-gpu-env")
	waitPolicies(t, ns)
	mallory := as(t, tenantUser)
	ctx := context.Background()
	const visible = "NVIDIA_VISIBLE_DEVICES"
	configMap := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "gpus"}, Key: key}}
	}
	env := func(e ...corev1.EnvVar) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, e...) }
	}
	envFrom := func(prefix string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{Prefix: prefix,
				ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gpus"}}}}
		}
	}
	gpuSpec := labelled(map[string]string{api.LabelGPUSpec: "g1.1"}, nil)
	tests := []struct {
		name   string
		modify []func(*corev1.Pod)
		want   string // "" when admitted
	}{
		{"valueFrom a ConfigMap key", []func(*corev1.Pod){env(corev1.EnvVar{Name: visible, ValueFrom: configMap("devices")})},
			"container main sets NVIDIA_VISIBLE_DEVICES through valueFrom"},
		{"valueFrom the Pod's own annotation", []func(*corev1.Pod){labelled(nil, map[string]string{"gpus": "all"}), env(corev1.EnvVar{Name: visible,
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['gpus']"}}})},
			"container main sets NVIDIA_VISIBLE_DEVICES through valueFrom"},
		{"valueFrom beside a gpu-spec Pod's GPUs", []func(*corev1.Pod){gpuSpec, env(corev1.EnvVar{Name: visible, ValueFrom: configMap("devices")})},
			"container main sets NVIDIA_VISIBLE_DEVICES through valueFrom"},
		{"envFrom a ConfigMap without a prefix", []func(*corev1.Pod){envFrom("")},
			"container main takes envFrom that can set NVIDIA_VISIBLE_DEVICES, NVIDIA_IMEX_CHANNELS, CUDA_VERSION"},
		{"envFrom a Secret under the prefix NVIDIA_", []func(*corev1.Pod){func(p *corev1.Pod) {
			p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{Prefix: "NVIDIA_",
				SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gpus"}}}}
		}}, "container main takes envFrom that can set NVIDIA_VISIBLE_DEVICES, NVIDIA_IMEX_CHANNELS, NVIDIA_GDS"},
		{"IMEX channels on a gpu-spec Pod", []func(*corev1.Pod){gpuSpec, env(corev1.EnvVar{Name: "NVIDIA_IMEX_CHANNELS", Value: "0"})},
			"container main sets NVIDIA_IMEX_CHANNELS"},
		{"a legacy CUDA image's default of every GPU", []func(*corev1.Pod){env(corev1.EnvVar{Name: "CUDA_VERSION", Value: "12.4.1"})},
			"container main sets CUDA_VERSION"},
		{"the host's InfiniBand devices beside a gpu-spec Pod's GPUs", []func(*corev1.Pod){gpuSpec, env(corev1.EnvVar{Name: "NVIDIA_MOFED", Value: "enabled"})},
			"container main sets NVIDIA_MOFED"},
		{"envFrom under a prefix no device variable has", []func(*corev1.Pod){envFrom("APP_")}, ""},
		{"envFrom with every device variable set in env", []func(*corev1.Pod){envFrom(""), env(corev1.EnvVar{Name: visible, Value: "void"},
			corev1.EnvVar{Name: "NVIDIA_IMEX_CHANNELS"}, corev1.EnvVar{Name: "CUDA_VERSION"}, corev1.EnvVar{Name: "NVIDIA_GDS", Value: "disabled"},
			corev1.EnvVar{Name: "NVIDIA_MOFED"}, corev1.EnvVar{Name: "NVIDIA_NVSWITCH"}, corev1.EnvVar{Name: "NVIDIA_GDRCOPY"})}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := mallory.CoreV1().Pods(ns).Create(ctx, plainPod("p", tt.modify...), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err, "a device variable admitted")
			assert.Contains(t, err.Error(), `ValidatingAdmissionPolicy 'runplane-gpu'`)
			assert.Contains(t, err.Error(), tt.want)
		})
	}

	// kubectl debug: an ephemeral container is no way around it either.
	_, err := mallory.CoreV1().Pods(ns).Create(ctx, plainPod("target"), metav1.CreateOptions{})
	require.NoError(t, err)
	debug := func(name string, e ...corev1.EnvVar) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error { // kwok writes the status meanwhile
			p, err := mallory.CoreV1().Pods(ns).Get(ctx, "target", metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: name, Image: "busybox:1.36", Env: e, TerminationMessagePolicy: corev1.TerminationMessageReadFile, ImagePullPolicy: corev1.PullIfNotPresent}})
			_, err = mallory.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, "target", p, metav1.UpdateOptions{})
			return err
		})
	}
	err = debug("dbg-all", corev1.EnvVar{Name: visible, Value: "all"})
	require.Error(t, err, "an ephemeral container with every GPU admitted")
	assert.Contains(t, err.Error(), "container dbg-all sets NVIDIA_VISIBLE_DEVICES")
	err = debug("dbg-from", corev1.EnvVar{Name: visible, ValueFrom: configMap("devices")})
	require.Error(t, err, "an ephemeral container with valueFrom admitted")
	assert.Contains(t, err.Error(), "container dbg-from sets NVIDIA_VISIBLE_DEVICES through valueFrom")
	require.NoError(t, debug("dbg-plain"), "a plain debug container")
	require.NoError(t, debug("dbg-void", corev1.EnvVar{Name: visible, Value: "void"}), "a debug container asking for no device")
}

// A tier that preempts other tenants' work is the platform's to grant: a
// tenant names runplane-workload-high and is denied until an admin
// annotates the Namespace, which the tenant itself may not do.
func TestPriorityTiersGrantedPerNamespace(t *testing.T) {
	startWebhook(t, func(c *webhook.Config) {
		c.Injection.WorkloadPriorityClasses = []string{api.PriorityClassWorkloadHigh}
		c.TierGrantorGroups = []string{"platform-admins"}
	})
	ns := tenantNamespace(t, "team-tier")
	mallory := as(t, tenantUser)
	high := func() *corev1.Pod {
		p := gpuPod("high", "g1.1")
		p.Spec.PriorityClassName = api.PriorityClassWorkloadHigh
		return p
	}
	ctx := context.Background()
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	_, err := mallory.CoreV1().Pods(ns).Create(ctx, high(), dryRun)
	require.Error(t, err, "an ungranted tier")
	assert.Contains(t, err.Error(), `namespace "team-tier" is not granted it (its annotation runplane.io/priority-tiers lists "")`)
	grant := func(tiers string) []byte {
		return []byte(`{"metadata":{"annotations":{"runplane.io/priority-tiers":"` + tiers + `"}}}`)
	}
	_, err = mallory.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, grant(api.PriorityClassWorkloadHigh), metav1.PatchOptions{})
	require.True(t, apierrors.IsForbidden(err), "the tenant grants itself a tier: %v", err)

	// Where RBAC lets tenants create and label their own Namespaces
	// (self-service platforms), runplane-namespace-tiers still keeps the
	// grant the platform's.
	selfService(t, ns)
	denied := "annotation runplane.io/priority-tiers grants a Namespace's GPU Pods priority tiers that preempt other tenants' work: only cluster admins and the groups platform-admins set or change it"
	patchDry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	// The policy is active once it denies (a dry run changes nothing).
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := mallory.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, grant(api.PriorityClassWorkloadHigh), patchDry)
		require.Error(c, err)
		assert.Contains(c, err.Error(), denied)
	}, 30*time.Second, 200*time.Millisecond)
	_, err = mallory.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"tier"}}}`), patchDry)
	require.NoError(t, err, "the tenant's own labels stay the tenant's")
	// The status and finalize subresources also write metadata.
	for _, sub := range []string{"status", "finalize"} {
		got, err := mallory.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		require.NoError(t, err)
		if got.Annotations == nil {
			got.Annotations = map[string]string{}
		}
		got.Annotations[api.AnnotationPriorityTiers] = api.PriorityClassWorkloadHigh
		body, err := json.Marshal(got)
		require.NoError(t, err)
		err = mallory.CoreV1().RESTClient().Put().Resource("namespaces").Name(ns).SubResource(sub).Param("dryRun", metav1.DryRunAll).Body(body).Do(ctx).Error()
		require.Error(t, err, "a grant through namespaces/%s", sub)
		assert.Contains(t, err.Error(), denied, "namespaces/%s", sub)
	}
	_, err = mallory.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-tier-2",
		Annotations: map[string]string{api.AnnotationPriorityTiers: api.PriorityClassWorkloadHigh}}}, dryRun)
	require.Error(t, err, "a new Namespace born with a grant")
	assert.Contains(t, err.Error(), denied)
	_, err = mallory.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-tier-2"}}, dryRun)
	require.NoError(t, err, "a Namespace without a grant")

	_, err = as(t, "platform-admin", "platform-admins").CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType,
		grant("runplane-batch, "+api.PriorityClassWorkloadHigh), metav1.PatchOptions{})
	require.NoError(t, err, "a grantor group grants")
	_, err = mallory.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, grant("runplane-batch"), patchDry)
	require.Error(t, err, "the tenant narrows or rewrites a grant")
	assert.Contains(t, err.Error(), denied)
	_, err = mallory.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"tier"}}}`), metav1.PatchOptions{})
	require.NoError(t, err, "a granted Namespace's other keys stay the tenant's")
	// The webhook reads Namespaces through an informer: wait for the grant.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := mallory.CoreV1().Pods(ns).Create(ctx, high(), dryRun)
		require.NoError(c, err, "a granted tier")
		assert.Equal(c, api.PriorityClassWorkloadHigh, got.Spec.PriorityClassName)
	}, 30*time.Second, 200*time.Millisecond)
}

// selfService lets the tenant create Namespaces and patch its own, and the
// group platform-admins patch Namespaces, as a self-service platform's RBAC
// would.
func selfService(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	c := env.Client()
	for _, b := range []struct {
		name    string
		rule    rbacv1.PolicyRule
		subject rbacv1.Subject
	}{
		{"tenant-namespaces", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"create"}},
			rbacv1.Subject{Kind: rbacv1.UserKind, Name: tenantUser}},
		{"tenant-own-namespace", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces", "namespaces/status", "namespaces/finalize"}, ResourceNames: []string{ns}, Verbs: []string{"get", "patch", "update"}},
			rbacv1.Subject{Kind: rbacv1.UserKind, Name: tenantUser}},
		{"platform-admins-namespaces", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "patch", "update"}},
			rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "platform-admins"}},
	} {
		_, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: b.name}, Rules: []rbacv1.PolicyRule{b.rule}}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: b.name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.name}, Subjects: []rbacv1.Subject{b.subject}}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = c.RbacV1().ClusterRoleBindings().Delete(context.Background(), b.name, metav1.DeleteOptions{})
			_ = c.RbacV1().ClusterRoles().Delete(context.Background(), b.name, metav1.DeleteOptions{})
		})
	}
}

// A denial that echoes a 200 KB value repeats only its start and its size.
func TestDenialTruncatesEchoedValue(t *testing.T) {
	startWebhook(t)
	ns := tenantNamespace(t, "team-echo")
	huge := strings.Repeat("x", 200_000)
	_, err := as(t, tenantUser).CoreV1().Pods(ns).Create(context.Background(),
		plainPod("p", labelled(map[string]string{api.LabelPool: "echo"}, map[string]string{api.AnnotationConcurrency: huge})),
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "…(200000 bytes)")
	assert.Less(t, len(err.Error()), 2048, "the denial repeats the value: %d bytes", len(err.Error()))
}

// Unknown runplane.io/ keys are denied with the known ones listed, and the
// keys runplane writes (on Pods and on claims) are runplane's alone.
func TestUnknownAndWrittenKeys(t *testing.T) {
	startWebhook(t)
	ns := tenantNamespace(t, "team-keys")
	waitPolicies(t, ns)
	ctx := context.Background()
	mallory := as(t, tenantUser)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	for _, tt := range []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		want        string
	}{
		{"a typo'd label", map[string]string{"runplane.io/gpu-specs": "g1.1"}, nil, "unknown runplane key(s) on a Pod: label runplane.io/gpu-specs; known labels: runplane.io/gpu-spec"},
		{"a claimed placeholder", map[string]string{api.LabelGPUSpec: "g1.1"}, map[string]string{api.AnnotationClaimedStock: "gpu-0/runplane-stock/p/uid"}, "annotation " + api.AnnotationClaimedStock + ": written by runplane"},
		{"another Pod's SSH Service", nil, map[string]string{}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == "" {
				_, err := mallory.CoreV1().Pods(ns).Create(ctx, plainPod("p", labelled(map[string]string{api.LabelSSHPod: "some-uid"}, nil)), dryRun)
				require.Error(t, err, "a Pod created with runplane's SSH Service selector")
				assert.Contains(t, err.Error(), "label "+api.LabelSSHPod+": written by runplane")
				return
			}
			_, err := mallory.CoreV1().Pods(ns).Create(ctx, plainPod("p", labelled(tt.labels, tt.annotations)), dryRun)
			require.Error(t, err, "admitted")
			assert.Contains(t, err.Error(), tt.want)
		})
	}

	claim := func(name string, a map[string]string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: a},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}
	}
	_, err := mallory.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim("typo", map[string]string{"runplane.io/prepare-from-imag": "busybox"}), dryRun)
	require.Error(t, err, "a typo'd claim key admitted")
	assert.Contains(t, err.Error(), "annotation runplane.io/prepare-from-imag: unknown runplane annotation")
	assert.Contains(t, err.Error(), api.AnnotationPrepareFromImage, "the known keys listed")

	_, err = mallory.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim("model", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}), metav1.CreateOptions{})
	require.NoError(t, err)
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := mallory.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "model", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Annotations[api.AnnotationPreparePhase] = api.PhaseSucceeded
		c.Annotations[api.AnnotationPrepareObservedAttempt] = "0"
		_, err = mallory.CoreV1().PersistentVolumeClaims(ns).Update(ctx, c, metav1.UpdateOptions{})
		return err
	})
	require.Error(t, err, "the tenant marked its claim prepared")
	assert.Contains(t, err.Error(), "written by runplane")
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := as(t, controllerUser, "system:serviceaccounts").CoreV1().PersistentVolumeClaims(ns).Get(ctx, "model", metav1.GetOptions{})
		if err != nil {
			return err
		}
		c.Annotations[api.AnnotationPreparePhase] = api.PhaseRunning
		_, err = as(t, controllerUser, "system:serviceaccounts").CoreV1().PersistentVolumeClaims(ns).Update(ctx, c, metav1.UpdateOptions{})
		return err
	})
	require.NoError(t, err, "runplane's controller writes the phase")
}

// A tenant allowed to mint ServiceAccount tokens cannot mint one for
// runplane's NATS audience (only the kubelet does, for the sidecar's
// projected volume); other audiences are untouched.
func TestNATSTokensOnlyFromTheKubelet(t *testing.T) {
	startWebhook(t)
	ns := tenantNamespace(t, "team-token")
	waitPolicies(t, ns)
	ctx := context.Background()
	c := env.Client()
	_, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "worker"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tokens"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tokens"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "tokens"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: tenantUser}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	mallory := as(t, tenantUser)
	mint := func(audience string) error {
		_, err := mallory.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "worker", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To(int64(600))}}, metav1.CreateOptions{})
		return err
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, mint("example.com"), "the tenant may mint tokens for other audiences")
	}, 30*time.Second, 100*time.Millisecond)
	// The API server picks the policy up on its own schedule.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		err := mint("nats.runplane.io")
		require.Error(ct, err, "a tenant minted a NATS token")
		assert.Contains(ct, err.Error(), "minted only by the kubelet")
	}, 30*time.Second, 200*time.Millisecond)
}

// TestPoliciesTypeCheck: the API server type-checks every policy the
// webhook manages against the kinds it matches (pods and
// pods/ephemeralcontainers for runplane-gpu) without a warning. A warning
// is a field or operator the checker does not know, which may be an error
// at run time, and an error under failurePolicy Fail refuses every Pod.
func TestPoliciesTypeCheck(t *testing.T) {
	startWebhook(t)
	policies := env.Client().AdmissionregistrationV1().ValidatingAdmissionPolicies()
	want, _ := webhook.Policies(webhook.PolicyOptions{Namespace: runplaneNS, GPU: webhook.DefaultGPUPolicy()})
	for _, p := range want {
		t.Run(p.Name, func(t *testing.T) {
			var checked *admissionregistrationv1.TypeChecking
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				got, err := policies.Get(context.Background(), p.Name, metav1.GetOptions{})
				require.NoError(c, err)
				require.Equal(c, got.Generation, got.Status.ObservedGeneration, "type check of the current generation")
				require.NotNil(c, got.Status.TypeChecking)
				checked = got.Status.TypeChecking
			}, 30*time.Second, 200*time.Millisecond)
			for _, w := range checked.ExpressionWarnings {
				t.Errorf("%s: %s", w.FieldRef, w.Warning)
			}
		})
	}
}

// A tenant allowed to manage ResourceClaimTemplates in its namespace can
// neither forge runplane's template of a DRA spec (its Pods would get the
// tenant's devices: eight GPUs for a one-GPU spec), nor change or delete
// one runplane made; its own templates stay its own.
func TestClaimTemplatesOnlyRunplanes(t *testing.T) {
	startWebhook(t)
	ns := tenantNamespace(t, "team-templates")
	ctx := context.Background()
	c := env.Client()
	_, err := c.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "templates"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaimtemplates"}, Verbs: []string{"*"}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "templates"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "templates"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: tenantUser}}}, metav1.CreateOptions{})
	require.NoError(t, err)

	spec, err := catalog.ParseSpec("h100.1", "cpu: 4\nmemory: 16Gi\ndra: {}\n")
	require.NoError(t, err)
	theirs, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, spec.ClaimTemplate(ns), metav1.CreateOptions{})
	require.NoError(t, err, "runplane's template (made by the admin here, as by the controller)")

	templates := as(t, tenantUser).ResourceV1().ResourceClaimTemplates(ns)
	own := func(name string, labels map[string]string) *resourcev1.ResourceClaimTemplate {
		tpl := spec.ClaimTemplate(ns)
		tpl.Name, tpl.Labels = name, labels
		// Devices of another class: a tenant's template of a GPU class is
		// runplane-gpu-claims' (claims_test.go).
		tpl.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName = "nic.example.com"
		tpl.Spec.Spec.Devices.Requests[0].Exactly.Count = 8
		return tpl
	}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := templates.Create(ctx, own("mine", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(ct, err, "the tenant may make its own templates")
	}, 30*time.Second, 100*time.Millisecond)
	// The API server picks the policy up on its own schedule.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := templates.Create(ctx, own("runplane-h100.8", nil), metav1.CreateOptions{})
		require.Error(ct, err, "a tenant forged a template under runplane's name")
		assert.Contains(ct, err.Error(), "are runplane's")
	}, 30*time.Second, 200*time.Millisecond)

	denied := map[string]error{}
	_, denied["create labelled managed-by"] = templates.Create(ctx, own("mine", map[string]string{api.LabelManagedBy: api.ManagedByController}), metav1.CreateOptions{})
	_, denied["generateName runplane-"] = templates.Create(ctx, func() *resourcev1.ResourceClaimTemplate {
		tpl := own("", nil)
		tpl.GenerateName = catalog.ClaimTemplatePrefix
		return tpl
	}(), metav1.CreateOptions{})
	_, denied["relabel runplane's"] = templates.Patch(ctx, theirs.Name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":null}}}`), metav1.PatchOptions{})
	denied["delete runplane's"] = templates.Delete(ctx, theirs.Name, metav1.DeleteOptions{})
	for what, err := range denied {
		if assert.Error(t, err, what) {
			assert.True(t, apierrors.IsForbidden(err), "%s: %v", what, err)
			assert.Contains(t, err.Error(), "are runplane's", what)
		}
	}
	_, err = templates.Create(ctx, own("mine", nil), metav1.CreateOptions{})
	require.NoError(t, err, "its own template")
	require.NoError(t, templates.Delete(ctx, "mine", metav1.DeleteOptions{}))
}
