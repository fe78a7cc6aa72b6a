package webhook

import (
	"context"
	"log/slog"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/webhook/mutate"
)

// The fixtures of the in-process tests: a fixed catalog, claims and
// PriorityClasses, standing in for cluster state (the integration tests in
// webhook/e2e use the real thing).

const testNamespace = "team-a"

// runplaneNamespace is runplane's namespace in the handler tests.
const runplaneNamespace = "runplane-system"

func testCatalog(t testing.TB) catalog.Catalog {
	t.Helper()
	c, err := catalog.Parse(map[string]string{
		"g1.1":      "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\n",
		"g8.a100":   "gpu: 8\ncpu: \"64\"\nmemory: 512Gi\nnodeSelector:\n  gpu.runplane.io/model: a100\ntolerations:\n- key: nvidia.com/gpu\n  operator: Exists\n  effect: NoSchedule\nstock: Required\n",
		"cpu.small": "gpu: 0\ncpu: \"2\"\nmemory: 4Gi\n",
		"mig.1g":    "gpu: 0\ncpu: \"4\"\nmemory: 16Gi\nresources:\n  nvidia.com/mig-1g.10gb: 1\n",
		"g4.nvlink": "gpu: 4\ncpu: \"32\"\nmemory: 128Gi\nnvlink: true\nnodeSelector:\n  nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3\n",
		"h100.2": "cpu: \"16\"\nmemory: 64Gi\nstock: Preferred\ntolerations:\n- key: nvidia.com/gpu\n  operator: Exists\n  effect: NoSchedule\n" +
			"dra:\n  count: 2\n  sameNVLinkDomain: true\n  selectors:\n  - device.attributes[\"gpu.nvidia.com\"].productName == \"NVIDIA H100 80GB HBM3\"\n",
		"mig.dra": "cpu: \"4\"\nmemory: 16Gi\ndra:\n  migProfile: 1g.10gb\n",
	})
	require.NoError(t, err)
	return c
}

type fakePVCs map[string]*corev1.PersistentVolumeClaim

func (f fakePVCs) GetPVC(_ context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	return f[namespace+"/"+name], nil
}

// fakeResourceClaims are DRA claims by namespace/name.
type fakeResourceClaims map[string]*resourcev1.ResourceClaim

func (f fakeResourceClaims) GetResourceClaim(_ context.Context, namespace, name string) (*resourcev1.ResourceClaim, error) {
	return f[namespace+"/"+name], nil
}

type fakePCs map[string]*schedulingv1.PriorityClass

func (f fakePCs) GetPriorityClass(_ context.Context, name string) (*schedulingv1.PriorityClass, error) {
	return f[name], nil
}

func claim(name string, annotations map[string]string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace, Annotations: annotations}}
}

func testMutator(t testing.TB) *mutate.Mutator {
	never := corev1.PreemptNever
	cat := testCatalog(t)
	return &mutate.Mutator{
		Config: mutate.Config{
			Image:          "ghcr.io/runplane/runplane:v0.1.0",
			PauseImage:     "registry.k8s.io/pause:3.10",
			NATSURL:        "nats://nats.runplane-system.svc:4222",
			NATSServerName: "nats.runplane-system.svc",
			SubjectPrefix:  api.DefaultSubjectPrefix,
			StreamName:     api.DefaultStreamName,
			// tenant-below-stock: a tier the platform allowed by mistake.
			WorkloadPriorityClasses: []string{api.PriorityClassWorkloadHigh, api.PriorityClassBatch, "tenant-below-stock"},
			Resources:               mutate.DefaultSidecarResources(),
		},
		Catalog: func() catalog.Catalog { return cat },
		NATSCA:  func() ([]byte, error) { return []byte(testNATSCA), nil },
		PVCs: fakePVCs{
			testNamespace + "/plain":    claim("plain", nil),
			testNamespace + "/prepared": claim("prepared", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36", api.AnnotationPreparePhase: api.PhaseSucceeded, api.AnnotationPrepareObservedAttempt: "0"}),
			// Succeeded, but the user bumped the attempt to prepare again.
			testNamespace + "/recovering": claim("recovering", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36", api.AnnotationPrepareAttempt: "2",
				api.AnnotationPreparePhase: api.PhaseSucceeded, api.AnnotationPrepareObservedAttempt: "1"}),
			testNamespace + "/preparing": claim("preparing", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36", api.AnnotationPreparePhase: api.PhaseRunning}),
			testNamespace + "/copying":   claim("copying", map[string]string{api.AnnotationPrepareFromPVC: "prepared"}),
		},
		PriorityClasses: fakePCs{
			api.PriorityClassWorkload:     {ObjectMeta: metav1.ObjectMeta{Name: api.PriorityClassWorkload}, Value: 1000},
			api.PriorityClassStock:        {ObjectMeta: metav1.ObjectMeta{Name: api.PriorityClassStock}, Value: -1000, PreemptionPolicy: &never},
			api.PriorityClassWorkloadHigh: {ObjectMeta: metav1.ObjectMeta{Name: api.PriorityClassWorkloadHigh}, Value: 2000},
			api.PriorityClassBatch:        {ObjectMeta: metav1.ObjectMeta{Name: api.PriorityClassBatch}, Value: 100},
			"tenant-below-stock":          {ObjectMeta: metav1.ObjectMeta{Name: "tenant-below-stock"}, Value: -2000},
		},
		// team-a (the golden cases' namespace) is granted no tier above
		// runplane-workload; team-paid is granted runplane-workload-high.
		Namespaces: fakeNamespaces{
			testNamespace: {ObjectMeta: metav1.ObjectMeta{Name: testNamespace}},
			paidNamespace: {ObjectMeta: metav1.ObjectMeta{Name: paidNamespace, Annotations: map[string]string{api.AnnotationPriorityTiers: "other, " + api.PriorityClassWorkloadHigh}}},
		},
	}
}

const paidNamespace = "team-paid"

// testNATSCA stands for the CA bundle the webhook reads from the ConfigMap.
const testNATSCA = "-----BEGIN CERTIFICATE-----\n(runplane's NATS CA)\n-----END CERTIFICATE-----\n"

type fakeNamespaces map[string]*corev1.Namespace

func (f fakeNamespaces) GetNamespace(_ context.Context, name string) (*corev1.Namespace, error) {
	return f[name], nil
}

// newHandler serves the admission paths as the webhook server does; a nil
// metrics is a fresh set.
func newHandler(t testing.TB, metrics *Metrics) http.Handler {
	if metrics == nil {
		metrics = NewMetrics()
	}
	mux := http.NewServeMux()
	v := &podValidator{claims: fakeResourceClaims{}, gpuClasses: func() []string { return []string{catalog.GPUDeviceClass, catalog.MIGDeviceClass} },
		log: slog.New(slog.DiscardHandler)}
	hs, err := hooks(testMutator(t), v, runplaneNamespace, metrics, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	for path, h := range hs {
		mux.Handle(path, h)
	}
	return mux
}
