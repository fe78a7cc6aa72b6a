package mutate

import (
	"context"
	"errors"
	"path"
	"reflect"
	"testing"

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
	if err != nil {
		f.Fatal(err)
	}
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
			if !errors.As(err, &inv) || inv.Key == "" || inv.Reason == "" {
				t.Fatalf("error is not an *InvalidError naming a key: %v", err)
			}
			return
		}
		if o.Concurrency < 1 || o.Concurrency > MaxConcurrency {
			t.Fatalf("concurrency %d accepted", o.Concurrency)
		}
		if !path.IsAbs(o.Framework.Socket) || path.Clean(o.Framework.Socket) != o.Framework.Socket || path.Dir(o.Framework.Socket) == "/" {
			t.Fatalf("socket %q accepted", o.Framework.Socket)
		}
		if o.Framework.InvokePath == "" || o.Framework.InvokePath[0] != '/' || o.Framework.HealthPath == "" || o.Framework.HealthPath[0] != '/' {
			t.Fatalf("paths %q %q accepted", o.Framework.InvokePath, o.Framework.HealthPath)
		}
		if o.SSH && o.SSHSecret == "" {
			t.Fatal("ssh without a Secret accepted")
		}
		if o.Stock != "" && (o.GPUSpec != "" || o.Pool != "" || o.SSH) {
			t.Fatal("stock combined with a workload label accepted")
		}

		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "app:1"}}},
		}
		res, err := m.Mutate(context.Background(), pod, "ns")
		if err != nil {
			if !IsDenial(err) {
				t.Fatalf("accepted options, then a non-denial error: %v", err)
			}
			return
		}
		again, err := m.Mutate(context.Background(), res.Pod, "ns")
		if err != nil || (len(res.Features) > 0) != again.Unchanged || !reflect.DeepEqual(again.Pod, res.Pod) {
			t.Fatalf("second pass not a no-op: err=%v unchanged=%v", err, again != nil && again.Unchanged)
		}
	})
}
