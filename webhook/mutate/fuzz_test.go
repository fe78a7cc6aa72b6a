package mutate

import (
	"context"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
)

// keys are the labels and annotations FuzzParseOptions sets, in the order
// of its arguments. An argument is only set when its bit is in mask, so the
// fuzzer explores absent keys as well as empty values.
var fuzzKeys = []struct {
	label bool
	key   string
}{
	{true, api.LabelGPUSpec}, {true, api.LabelStock}, {true, api.LabelPool}, {true, api.LabelSSH}, {true, api.LabelEgress},
	{false, api.AnnotationSSHAuthorizedKeys}, {false, api.AnnotationFrameworkSocket}, {false, api.AnnotationFrameworkInvokePath},
	{false, api.AnnotationFrameworkHealthPath}, {false, api.AnnotationConcurrency},
}

type staticPCs struct{}

func (staticPCs) GetPriorityClass(_ context.Context, name string) (*schedulingv1.PriorityClass, error) {
	return &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: 7}, nil
}

type noPVCs struct{}

func (noPVCs) GetPVC(context.Context, string, string) (*corev1.PersistentVolumeClaim, error) {
	return nil, nil
}

// FuzzParseOptions checks that any label and annotation values either parse
// into options that hold their invariants or fail with an *InvalidError
// naming a key, never a panic; and that mutating with accepted options is
// idempotent. `go test ./webhook/mutate` runs the seed corpus below.
func FuzzParseOptions(f *testing.F) {
	f.Add(uint16(0b0000000001), "g1.1", "", "", "", "", "", "", "", "", "")
	f.Add(uint16(0b0000000010), "", "g1.1", "", "", "", "", "", "", "", "")
	f.Add(uint16(0b1111001101), "g1.1", "", "echo", "enabled", "", "keys", "/run/fw/fw.sock", "/v1/invoke", "/health", "4")
	f.Add(uint16(0b0000000100), "", "", "a.b", "", "", "", "", "", "", "")
	f.Add(uint16(0b0000011100), "", "", "echo", "enabled", "open", "", "", "", "", "")
	f.Add(uint16(0b1000000100), "", "", "echo", "", "", "", "", "", "", "0")
	f.Add(uint16(0b1000000100), "", "", "echo", "", "", "", "", "", "", "+1")
	f.Add(uint16(0b0001000100), "", "", "echo", "", "", "", "/", "", "", "")
	f.Add(uint16(0b0001000100), "", "", "echo", "", "", "", "/a/../b.sock", "", "", "")
	f.Add(uint16(0b0010000100), "", "", "echo", "", "", "", "", "no-slash", "", "")
	f.Add(uint16(0b0000101000), "", "", "", "enabled", "", "Bad_Name", "", "", "", "")
	f.Add(uint16(0b0000000011), "g1.1", "g1.1", "", "", "", "", "", "", "", "")
	f.Add(uint16(0b0000000001), "", "", "", "", "", "", "", "", "", "")

	cat, err := catalog.Parse(map[string]string{"g1.1": "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\n"})
	require.NoError(f, err)
	m := &Mutator{
		Config:          Config{Image: "runplane:v1", PauseImage: "pause:3.10", NATSURL: "nats://n:4222", SubjectPrefix: "p", StreamName: "S"},
		Catalog:         func() catalog.Catalog { return cat },
		PVCs:            noPVCs{},
		PriorityClasses: staticPCs{},
	}
	f.Fuzz(func(t *testing.T, mask uint16, v0, v1, v2, v3, v4, v5, v6, v7, v8, v9 string) {
		labels, annotations := map[string]string{}, map[string]string{}
		for i, v := range []string{v0, v1, v2, v3, v4, v5, v6, v7, v8, v9} {
			if mask&(1<<i) == 0 {
				continue
			}
			if fuzzKeys[i].label {
				labels[fuzzKeys[i].key] = v
			} else {
				annotations[fuzzKeys[i].key] = v
			}
		}
		o, err := ParseOptions(labels, annotations)
		if err != nil {
			var inv *InvalidError
			require.ErrorAs(t, err, &inv)
			require.NotEmpty(t, inv.Key, "an *InvalidError names a key: %v", err)
			require.NotEmpty(t, inv.Reason, "an *InvalidError has a reason: %v", err)
			return
		}
		require.True(t, o.Concurrency >= 1 && o.Concurrency <= MaxConcurrency, "concurrency %d accepted", o.Concurrency)
		require.True(t, path.IsAbs(o.Framework.Socket) && path.Clean(o.Framework.Socket) == o.Framework.Socket && path.Dir(o.Framework.Socket) != "/",
			"socket %q accepted", o.Framework.Socket)
		require.True(t, strings.HasPrefix(o.Framework.InvokePath, "/") && strings.HasPrefix(o.Framework.HealthPath, "/"),
			"paths %q %q accepted", o.Framework.InvokePath, o.Framework.HealthPath)
		require.False(t, o.SSH && o.SSHSecret == "", "ssh without a Secret accepted")
		require.False(t, o.Stock != "" && (o.GPUSpec != "" || o.Pool != "" || o.SSH), "stock combined with a workload label accepted")

		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "app:1"}}},
		}
		res, err := m.Mutate(context.Background(), pod, "ns")
		if err != nil {
			require.True(t, IsDenial(err), "accepted options, then a non-denial error: %v", err)
			return
		}
		again, err := m.Mutate(context.Background(), res.Pod, "ns")
		require.NoError(t, err, "second pass")
		require.Equal(t, res.Pod, again.Pod, "second pass not a no-op")
	})
}
