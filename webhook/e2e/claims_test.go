package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
)

// claimControllerUser is kube-controller-manager's resource-claim
// controller as a real cluster runs it (--use-service-account-credentials,
// kubeadm's default); its RBAC is the API server's bootstrap role.
const claimControllerUser = "system:serviceaccount:kube-system:resource-claim-controller"

// podClaimNameAnnotation is what the resource-claim controller writes on
// the claim it makes from a Pod's ResourceClaimTemplate.
const podClaimNameAnnotation = "resource.kubernetes.io/pod-claim-name"

// A tenant allowed to manage ResourceClaims and ResourceClaimTemplates
// (the edit role gives both) cannot get GPUs past runplane with its own
// claim or template of a GPU DeviceClass, by exactly or by firstAvailable:
// its Pod would be placed by the default scheduler, outside the catalog,
// the ledger and stock. Claims of other classes stay its own, and a GPU
// Pod of a DRA spec still gets its claim from kube-controller-manager.
func TestGPUClaimsOnlyThroughRunplane(t *testing.T) {
	startWebhook(t)
	ns := tenantNamespace(t, "team-claims")
	ctx := context.Background()
	claimsRole(t, ns)
	waitPolicies(t, ns)

	exactly := func(class string) resourcev1.DeviceRequest {
		return resourcev1.DeviceRequest{Name: strings.ReplaceAll(class, ".", "-"), Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class,
			AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 8}}
	}
	firstAvailable := func(classes ...string) resourcev1.DeviceRequest {
		r := resourcev1.DeviceRequest{Name: "dev"}
		for i, class := range classes {
			r.FirstAvailable = append(r.FirstAvailable, resourcev1.DeviceSubRequest{Name: "alt" + string(rune('a'+i)), DeviceClassName: class,
				AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1})
		}
		return r
	}
	spec := func(reqs ...resourcev1.DeviceRequest) resourcev1.ResourceClaimSpec {
		return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: reqs}}
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	mallory := as(t, tenantUser).ResourceV1()
	claim := func(s resourcev1.ResourceClaimSpec) func() error {
		return func() error {
			_, err := mallory.ResourceClaims(ns).Create(ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "mine"}, Spec: s}, dry)
			return err
		}
	}
	template := func(s resourcev1.ResourceClaimSpec) func() error {
		return func() error {
			_, err := mallory.ResourceClaimTemplates(ns).Create(ctx, &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "mine"},
				Spec: resourcev1.ResourceClaimTemplateSpec{Spec: s}}, dry)
			return err
		}
	}
	// A claim as kube-controller-manager makes it from a Pod's template.
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "0d3c2d4e-8a6b-4b7e-9a51-7b1f9b0c1d2e", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	asController := func(annotated bool) func() error {
		return func() error {
			cl := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{GenerateName: "p-gpu-", OwnerReferences: []metav1.OwnerReference{owner}},
				Spec: spec(exactly(catalog.GPUDeviceClass))}
			if annotated {
				cl.Annotations = map[string]string{podClaimNameAnnotation: "gpu"}
			}
			_, err := as(t, claimControllerUser).ResourceV1().ResourceClaims(ns).Create(ctx, cl, dry)
			return err
		}
	}

	const fix = "label the Pod runplane.io/gpu-spec=<spec of the catalog>"
	tests := []struct {
		name string
		try  func() error
		want string // "" when admitted
	}{
		{"claim of whole GPUs", claim(spec(exactly(catalog.GPUDeviceClass))), "spec.devices.requests[gpu-nvidia-com].exactly.deviceClassName gpu.nvidia.com"},
		{"claim of MIG partitions", claim(spec(exactly("rdma.example.com"), exactly(catalog.MIGDeviceClass))),
			"spec.devices.requests[mig-nvidia-com].exactly.deviceClassName mig.nvidia.com"},
		{"claim with a GPU among firstAvailable", claim(spec(firstAvailable("rdma.example.com", catalog.GPUDeviceClass))),
			"spec.devices.requests[dev].firstAvailable[altb].deviceClassName gpu.nvidia.com"},
		{"template of whole GPUs", template(spec(exactly(catalog.GPUDeviceClass))), "spec.spec.devices.requests[gpu-nvidia-com].exactly.deviceClassName gpu.nvidia.com"},
		{"template with a GPU among firstAvailable", template(spec(firstAvailable(catalog.MIGDeviceClass))),
			"spec.spec.devices.requests[dev].firstAvailable[alta].deviceClassName mig.nvidia.com"},
		{"a kube-system identity's claim not made for a Pod", asController(false), "spec.devices.requests[gpu-nvidia-com].exactly.deviceClassName gpu.nvidia.com"},
		{"claim of another class", claim(spec(exactly("rdma.example.com"))), ""},
		{"template of another class, by firstAvailable", template(spec(firstAvailable("rdma.example.com", "nic.example.com"))), ""},
		{"the resource-claim controller's claim for a Pod", asController(true), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.try()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err, "GPUs past runplane admitted")
			assert.True(t, apierrors.IsForbidden(err), "%v", err)
			assert.Contains(t, err.Error(), `ValidatingAdmissionPolicy 'runplane-gpu-claims'`)
			assert.Contains(t, err.Error(), tt.want)
			assert.Contains(t, err.Error(), fix)
		})
	}

	// The scheduler makes a claim for a Pod's request of a DeviceClass's
	// extended resource (DRA's extended-resource mapping): that request
	// is a GPU request.
	_, err := as(t, tenantUser).CoreV1().Pods(ns).Create(ctx, plainPod("ext", func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(resourcev1.ResourceDeviceClassPrefix + catalog.GPUDeviceClass): resource.MustParse("1")}
	}), dry)
	require.Error(t, err, "a request of the GPU DeviceClass's extended resource admitted")
	assert.Contains(t, err.Error(), `ValidatingAdmissionPolicy 'runplane-gpu'`)
	assert.Contains(t, err.Error(), "container(s) main request GPUs")

	made := draPodClaim(t, ns, "dra-pod")
	// Its metadata stays anyone's to change (the scheduler's finalizer,
	// the garbage collector, the tenant's labels): an update is denied
	// only for a GPU class it adds.
	_, err = mallory.ResourceClaims(ns).Patch(ctx, made, types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"a"}}}`), metav1.PatchOptions{})
	require.NoError(t, err, "a label on the Pod's claim")
}

// claimsRole lets the tenant manage ResourceClaims and
// ResourceClaimTemplates in ns (the edit role gives both).
func claimsRole(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	c := env.Client()
	_, err := c.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "claims"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims", "resourceclaimtemplates"}, Verbs: []string{"*"}}}},
		metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "claims"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "claims"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: tenantUser}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// The barrier for both the Role and runplane-gpu-claims, which the API
	// server picks up each on its own schedule: the tenant's dry-run claim
	// of a GPU class is refused by the policy, not by RBAC, and not admitted.
	gpus := resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu",
		Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: catalog.GPUDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := as(t, tenantUser).ResourceV1().ResourceClaims(ns).Create(ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "policy-probe"}, Spec: gpus},
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.Error(ct, err, "policy runplane-gpu-claims not enforced")
		assert.Contains(ct, err.Error(), "ValidatingAdmissionPolicy 'runplane-gpu-claims'")
	}, 30*time.Second, 200*time.Millisecond)
}

// draPodClaim is the real path of a DRA GPU Pod: runplane's template (made
// by the admin here, as by the controller), the tenant's GPU Pod named pod
// of the DRA spec, and the claim kube-controller-manager makes for it from
// the template, whose name it returns.
func draPodClaim(t *testing.T, ns, pod string) string {
	t.Helper()
	ctx := context.Background()
	c := env.Client()
	draSpecOf, err := catalog.ParseSpec(draSpec, "cpu: \"8\"\nmemory: 32Gi\ndra: {}\n")
	require.NoError(t, err)
	_, err = c.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, draSpecOf.ClaimTemplate(ns), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = as(t, tenantUser).CoreV1().Pods(ns).Create(ctx, gpuPod(pod, draSpec), metav1.CreateOptions{})
	require.NoError(t, err)
	var made string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		require.NoError(ct, err)
		require.Len(ct, p.Status.ResourceClaimStatuses, 1, "kube-controller-manager made the Pod's claim")
		made = ptr.Deref(p.Status.ResourceClaimStatuses[0].ResourceClaimName, "")
		require.NotEmpty(ct, made)
		got, err := c.ResourceV1().ResourceClaims(ns).Get(ctx, made, metav1.GetOptions{})
		require.NoError(ct, err)
		assert.Equal(ct, catalog.GPUDeviceClass, got.Spec.Devices.Requests[0].Exactly.DeviceClassName)
	}, 30*time.Second, 200*time.Millisecond)
	return made
}

// A tenant's second, plain Pod cannot name the claim kube-controller-manager
// made for its DRA GPU Pod by resourceClaimName: it would share the device
// and keep it once the GPU Pod is gone, outside runplane's ledger, stock
// and quotas. Nor a claim that does not exist yet (its requests are
// unknown). A claim of another class stays the tenant's to share, and a
// cluster admin may name any.
func TestPodMayNotNameAGPUClaim(t *testing.T) {
	r := startWebhook(t)
	ns := tenantNamespace(t, "team-claim-name")
	ctx := context.Background()
	claimsRole(t, ns)
	waitPolicies(t, ns)
	made := draPodClaim(t, ns, "gpu-pod")

	mallory := as(t, tenantUser)
	_, err := mallory.ResourceV1().ResourceClaims(ns).Create(ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "nic"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "nic",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "rdma.example.com", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}}},
		metav1.CreateOptions{})
	require.NoError(t, err)
	naming := func(name, claim string) *corev1.Pod {
		return plainPod(name, func(p *corev1.Pod) {
			p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "dev", ResourceClaimName: ptr.To(claim)}}
			p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "dev"}}
		})
	}
	const denied = `admission webhook "resource-claims.runplane.io" denied the request: spec.resourceClaims[dev].resourceClaimName names ResourceClaim `
	tests := []struct {
		name   string
		client kubernetes.Interface
		pod    *corev1.Pod
		want   []string // "" when admitted
	}{
		{"the tenant's plain Pod naming its GPU Pod's claim", mallory, naming("thief", made),
			[]string{denied + `"` + made + `"`, "spec.devices.requests[gpu].exactly.deviceClassName gpu.nvidia.com is a GPU DeviceClass"}},
		{"a GPU Pod of runplane naming it besides its own GPUs", mallory, naming("gpu-thief", made), []string{denied + `"` + made + `"`}},
		{"a claim that does not exist yet", mallory, naming("early", "gpu-pod-gpu-later"),
			[]string{denied + `"gpu-pod-gpu-later", which does not exist in namespace ` + ns, "create the claim first"}},
		{"a claim of another class", mallory, naming("nic-user", "nic"), nil},
		{"a cluster admin", env.Client(), naming("admin-debug", made), nil},
	}
	tests[1].pod.Labels = map[string]string{api.LabelGPUSpec: "g1.1"}
	// Availability: a Pod naming no claim by name (a plain one, a GPU Pod
	// with its claim from a template) never reaches the entry; admission
	// is synchronous, so the count is final when Create returns.
	reviews := func() string {
		var out []string
		for l := range strings.Lines(r.metrics(t)) {
			if strings.HasPrefix(l, "runplane_webhook_admissions_total{") && strings.Contains(l, `feature="resource-claims"`) {
				out = append(out, l)
			}
		}
		return strings.Join(out, "")
	}
	before := reviews()
	_, err = mallory.CoreV1().Pods(ns).Create(ctx, plainPod("plain"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err)
	_, err = mallory.CoreV1().Pods(ns).Create(ctx, gpuPod("dra-again", draSpec), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.NoError(t, err)
	require.Equal(t, before, reviews(), "a Pod naming no claim was sent to resource-claims.runplane.io")
	t.Cleanup(func() {
		assert.Contains(t, reviews(), `outcome="denied"`, "the refusals were counted")
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.client.CoreV1().Pods(ns).Create(ctx, tt.pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err, "a Pod naming the claim admitted")
			assert.True(t, apierrors.IsForbidden(err), "%v", err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}
