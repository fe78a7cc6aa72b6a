package webhook

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// TestPatchMatchesWholeDiff checks that the field-wise Patch emits the
// operations (each value equal as JSON) of jsonpatch.CreatePatch on the two
// whole encoded Pods, for every golden input and for hand-made edits the golden inputs do
// not cover (removals, shrinking lists, type changes, escaped keys).
func TestPatchMatchesWholeDiff(t *testing.T) {
	m := testMutator(t)
	type pair struct {
		name     string
		from, to *corev1.Pod
	}
	var pairs []pair
	inputs, err := filepath.Glob("testdata/pods/*.in.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, inputs, "golden inputs")
	for _, in := range inputs {
		raw, err := os.ReadFile(in)
		require.NoError(t, err)
		var pod corev1.Pod
		require.NoError(t, json.Unmarshal(podJSON(t, raw), &pod))
		res, err := m.Mutate(context.Background(), &pod, testNamespace)
		if err != nil {
			continue // a denial: no patch
		}
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		pairs = append(pairs, pair{name, &pod, res.Pod}, pair{name + "/reversed", res.Pod, &pod})
	}
	var base corev1.Pod
	raw, err := os.ReadFile("testdata/pods/gpu-pool-ssh-storage.out.yaml")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(podJSON(t, raw), &base))
	edit := func(name string, f func(p *corev1.Pod)) {
		to := base.DeepCopy()
		f(to)
		pairs = append(pairs, pair{name, &base, to})
	}
	edit("equal", func(*corev1.Pod) {})
	edit("status", func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning })
	edit("kind", func(p *corev1.Pod) { p.Kind = "Pod" })
	edit("drop-labels", func(p *corev1.Pod) { p.Labels = nil })
	edit("escaped-key", func(p *corev1.Pod) { p.Annotations["a~b/c"] = "x" })
	edit("shrink-init", func(p *corev1.Pod) { p.Spec.InitContainers = p.Spec.InitContainers[:1] })
	edit("no-init", func(p *corev1.Pod) { p.Spec.InitContainers = nil })
	edit("empty-init", func(p *corev1.Pod) { p.Spec.InitContainers = []corev1.Container{} })
	edit("nil-pointer", func(p *corev1.Pod) { p.Spec.Priority = nil })
	edit("quantity", func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = resource.MustParse("3")
	})
	edit("command", func(p *corev1.Pod) { p.Spec.InitContainers[0].Command = append(p.Spec.InitContainers[0].Command, "x") })
	edit("deep", func(p *corev1.Pod) {
		p.Spec.InitContainers[0].StartupProbe.PeriodSeconds = 7
		p.Spec.InitContainers[0].SecurityContext.RunAsUser = ptr.To(int64(1))
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "<&>", Operator: corev1.TolerationOpExists})
	})
	edit("escapes", func(p *corev1.Pod) {
		weird := corev1.EnvVar{Name: "X", Value: "é\xff\u2028<\"\\\t"}
		p.Spec.InitContainers[0].Env = append(p.Spec.InitContainers[0].Env, weird)
		c := p.Spec.InitContainers[0].DeepCopy()
		c.Name, c.Env = "extra", []corev1.EnvVar{weird}
		p.Spec.InitContainers = append(p.Spec.InitContainers, *c)
		p.Annotations["é\u2028<"] = "\xfe"
	})
	for _, tc := range pairs {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Patch(tc.from, tc.to)
			require.NoError(t, err)
			want, err := createPatch(tc.from, tc.to)
			require.NoError(t, err)
			require.Equal(t, canonicalOps(t, want), canonicalOps(t, got))
		})
	}
}

// canonicalOps is each operation encoded, decoded into generic JSON and
// encoded again (object keys sorted), sorted: the order of a patch's
// operations from an object diff follows map iteration.
func canonicalOps(t *testing.T, ops []jsonpatch.Operation) []string {
	t.Helper()
	out := make([]string, len(ops))
	for i := range ops {
		b, err := json.Marshal(&ops[i])
		require.NoError(t, err)
		var generic any
		require.NoError(t, json.Unmarshal(b, &generic))
		b, err = json.Marshal(generic)
		require.NoError(t, err)
		out[i] = string(b)
	}
	slices.Sort(out)
	return out
}
