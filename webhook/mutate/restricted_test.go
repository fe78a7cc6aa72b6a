package mutate

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/extender/ledger"
)

func restrictedMutator(t *testing.T) *Mutator {
	t.Helper()
	cat, err := catalog.Parse(map[string]string{
		"g1.1": "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\n",
		"tiny": "gpu: 1\ncpu: 60m\nmemory: 32Gi\n",
	})
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.Image, cfg.NATSURL = "runplane:v1", "nats://n:4222"
	return &Mutator{Config: cfg, Catalog: func() catalog.Catalog { return cat }, PVCs: noPVCs{}, PriorityClasses: staticPCs{}}
}

// compliant is a user container that meets Pod Security "restricted" by
// its own securityContext (the user's business, which runplane leaves as is).
func compliant(name string) corev1.Container {
	return corev1.Container{Name: name, Image: "app:1", Command: []string{"app"}, SecurityContext: &corev1.SecurityContext{
		RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}}
}

// Every container runplane injects, and the placeholder it makes of any
// template, pass the Kubernetes Pod Security "restricted" checks (the
// API server's own library): a Pod whose own containers comply is admitted
// in a restricted namespace after mutation, and its own containers'
// securityContexts are left exactly as they were.
func TestInjectedContainersAreRestricted(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	require.NoError(t, err)
	restricted := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	m := restrictedMutator(t)
	ann := map[string]string{api.AnnotationSSHAuthorizedKeys: "keys"}
	tests := []struct {
		name   string
		labels map[string]string
		spec   corev1.PodSpec
	}{
		{"pool", map[string]string{api.LabelPool: "echo"}, corev1.PodSpec{Containers: []corev1.Container{compliant("main")}}},
		{"ssh", map[string]string{api.LabelSSH: api.SSHEnabled}, corev1.PodSpec{Containers: []corev1.Container{compliant("main")}}},
		{"gpu pool ssh", map[string]string{api.LabelGPUSpec: "g1.1", api.LabelPool: "echo", api.LabelSSH: api.SSHEnabled},
			corev1.PodSpec{Containers: []corev1.Container{compliant("main"), compliant("helper")}}},
		// A template that runs as root with every capability: the
		// placeholder made of it is restricted all the same.
		{"stock from a privileged template", map[string]string{api.LabelStock: "g1.1"}, corev1.PodSpec{Containers: []corev1.Container{{
			Name: "hold", Image: "busybox", SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To(int64(0)), AllowPrivilegeEscalation: ptr.To(true),
				Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: tt.labels, Annotations: ann}, Spec: tt.spec}
			res, err := m.Mutate(context.Background(), in, "ns")
			require.NoError(t, err)
			for _, r := range eval.EvaluatePod(restricted, &res.Pod.ObjectMeta, &res.Pod.Spec) {
				assert.True(t, r.Allowed, "restricted: %s: %s", r.ForbiddenReason, r.ForbiddenDetail)
			}
			assert.Nil(t, res.Pod.Spec.SecurityContext, "runplane sets no Pod-level securityContext: it would change the user's containers")
			if tt.labels[api.LabelStock] != "" {
				return
			}
			for _, want := range tt.spec.Containers {
				for _, got := range res.Pod.Spec.Containers {
					if got.Name == want.Name {
						assert.Equal(t, want.SecurityContext, got.SecurityContext, "container %s", want.Name)
					}
				}
			}
		})
	}
}

// A GPU pool Pod requests exactly its spec in total (what the scheduler and
// the extender's ledger add up), so a same-spec placeholder frees exactly
// what it needs; every injected sidecar carries requests and limits, as a
// compute ResourceQuota demands.
func TestSidecarResources(t *testing.T) {
	m := restrictedMutator(t)
	tests := []struct {
		name     string
		labels   map[string]string
		ann      map[string]string
		worker   corev1.ResourceRequirements
		deny     string
		mainReqs corev1.ResourceList
	}{
		{name: "defaults", labels: map[string]string{api.LabelGPUSpec: "g1.1", api.LabelPool: "echo", api.LabelSSH: api.SSHEnabled},
			worker:   DefaultSidecarResources()[api.SidecarContainerName],
			mainReqs: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("7950m"), corev1.ResourceMemory: resource.MustParse("32704Mi")}},
		{name: "override", labels: map[string]string{api.LabelGPUSpec: "g1.1", api.LabelPool: "echo", api.LabelSSH: api.SSHEnabled},
			ann: map[string]string{api.AnnotationWorkerResources: "requests.cpu=1,limits.cpu=2"},
			worker: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("256Mi")}},
			mainReqs: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("7000m"), corev1.ResourceMemory: resource.MustParse("32704Mi")}},
		{name: "unknown key", labels: map[string]string{api.LabelPool: "echo"}, ann: map[string]string{api.AnnotationWorkerResources: "requests.gpu=1"},
			deny: `annotation runplane.io/worker-resources: unknown key "requests.gpu"; the value is comma-separated <key>=<quantity> with keys requests.cpu, requests.memory, requests.ephemeral-storage, limits.cpu, limits.memory, limits.ephemeral-storage, e.g. "requests.cpu=100m,limits.memory=512Mi"`},
		{name: "bad quantity", labels: map[string]string{api.LabelPool: "echo"}, ann: map[string]string{api.AnnotationWorkerResources: "requests.cpu=lots"},
			deny: `annotation runplane.io/worker-resources: requests.cpu="lots" is not a positive quantity (such as 100m, 1, 512Mi); the value is comma-separated`},
		{name: "no pair", labels: map[string]string{api.LabelPool: "echo"}, ann: map[string]string{api.AnnotationWorkerResources: "1Gi"},
			deny: `annotation runplane.io/worker-resources: "1Gi" is not <key>=<quantity>`},
		// SSH sessions run in the main container: there is no SSH
		// container to size, and the old override is refused, not ignored.
		{name: "ssh resources", labels: map[string]string{api.LabelSSH: api.SSHEnabled}, ann: map[string]string{api.AnnotationSSHResources: "limits.memory=4Gi"},
			deny: `annotation runplane.io/ssh-resources: no longer applies: SSH sessions run inside the main container`},
		{name: "request above the default limit", labels: map[string]string{api.LabelPool: "echo"}, ann: map[string]string{api.AnnotationWorkerResources: "requests.memory=1Gi"},
			deny: `annotation runplane.io/worker-resources: requests.memory 1Gi is above limits.memory 256Mi (after the platform defaults for runplane-worker: requests.cpu=50m,requests.memory=64Mi,limits.cpu=1,limits.memory=256Mi); raise the limit too`},
		{name: "spec smaller than the sidecars", labels: map[string]string{api.LabelGPUSpec: "tiny", api.LabelPool: "echo", api.LabelSSH: api.SSHEnabled},
			ann:  map[string]string{api.AnnotationWorkerResources: "requests.cpu=100m"},
			deny: `label runplane.io/gpu-spec: container "main" resource cpu: GPU spec "tiny" gives 60m, no more than runplane's sidecars request (100m)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ann := map[string]string{api.AnnotationSSHAuthorizedKeys: "keys"}
			for k, v := range tt.ann {
				ann[k] = v
			}
			in := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: tt.labels, Annotations: ann},
				Spec: corev1.PodSpec{Containers: []corev1.Container{compliant("main")}}}
			res, err := m.Mutate(context.Background(), in, "ns")
			if tt.deny != "" {
				require.Error(t, err)
				assert.True(t, IsDenial(err), "%v", err)
				assert.Contains(t, err.Error(), tt.deny)
				return
			}
			require.NoError(t, err)
			byName := map[string]corev1.Container{}
			for _, c := range append(res.Pod.Spec.InitContainers, res.Pod.Spec.Containers...) {
				byName[c.Name] = c
				assert.NotEmpty(t, c.Resources.Requests, "container %s has no requests", c.Name)
				assert.NotEmpty(t, c.Resources.Limits, "container %s has no limits", c.Name)
			}
			assert.Equal(t, tt.worker, byName[api.SidecarContainerName].Resources)
			assert.NotContains(t, byName, api.SSHContainerName, "no SSH sidecar: the server runs in the main container")
			for k, want := range tt.mainReqs {
				got := byName["main"].Resources.Requests[k]
				assert.Zero(t, want.Cmp(got), "main %s: want %s, got %s", k, want.String(), got.String())
			}
			total := ledger.PodRequests(res.Pod)
			assert.Equal(t, int64(8000), total.MilliCPU, "the Pod's total CPU is the spec's")
			assert.Equal(t, int64(32<<30), total.Memory, "the Pod's total memory is the spec's")
			again, err := m.Mutate(context.Background(), res.Pod, "ns")
			require.NoError(t, err)
			assert.Equal(t, res.Pod, again.Pod, "a reinvocation changes nothing")
		})
	}
}
