package realnode

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/hack/images"
	"github.com/runplane/runplane/test/cluster"
)

// realPod is a Pod of the user image pinned to the real node.
func realPod(name, script string, gpus int64) *corev1.Pod {
	c := corev1.Container{Name: "main", Image: images.UserRef, Command: []string{"sh", "-c", script}}
	if gpus > 0 {
		q := *resource.NewQuantity(gpus, resource.DecimalSI)
		c.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{api.DefaultGPUResource: q}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers:    []corev1.Container{c},
			NodeSelector:  map[string]string{cluster.RealNodeLabel: "true"},
			Tolerations:   []corev1.Toleration{cluster.RealNodeToleration},
			RestartPolicy: corev1.RestartPolicyNever,
		},
	}
}

// logsWhen waits until the Pod's log has a line starting with marker and
// returns the log.
func logsWhen(t testing.TB, ctx context.Context, ns, pod, marker string) string {
	t.Helper()
	var log string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		data, err := env.Client().CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		log = string(data)
		return strings.Contains(log, marker), nil
	})
	require.NoError(t, err, "pod %s/%s never logged %q; last log:\n%s", ns, pod, marker, log)
	return log
}

// Each container that asks for GPUs sees exactly its own fake devices and
// NVIDIA_VISIBLE_DEVICES naming them, and two containers never share one.
func TestGPUDevicesPerContainer(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// runplane's own namespace: the runplane-gpu admission policy (which the
	// webhook installs) admits GPU requests elsewhere only through a
	// gpu-spec label, and this test is about the device plugin, not admission.
	ns := api.DefaultNamespace
	script := `echo "devices: $(ls /dev | grep nvidia | tr '\n' ' ')"; echo "visible: $NVIDIA_VISIBLE_DEVICES"; echo done; sleep 3600`
	seen := map[string]string{}
	for _, name := range []string{"two-a", "two-b", "one-more"} {
		// The node's GPUs go back for the tests after this one.
		t.Cleanup(func() {
			_ = env.Client().CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
	}
	for _, name := range []string{"two-a", "two-b"} {
		_, err := env.Client().CoreV1().Pods(ns).Create(ctx, realPod(name, script, 2), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for _, name := range []string{"two-a", "two-b"} {
		log := logsWhen(t, ctx, ns, name, "done")
		var devs, visible []string
		for _, line := range strings.Split(log, "\n") {
			if v, ok := strings.CutPrefix(line, "devices: "); ok {
				devs = strings.Fields(v)
			}
			if v, ok := strings.CutPrefix(line, "visible: "); ok {
				visible = strings.Split(strings.TrimSpace(v), ",")
			}
		}
		require.Len(t, devs, 2, "pod %s log:\n%s", name, log)
		require.Len(t, visible, 2, "pod %s log:\n%s", name, log)
		sort.Strings(devs)
		for _, id := range visible {
			want := "nvidia" + strings.TrimPrefix(id, "GPU-fake-")
			require.Contains(t, devs, want, "pod %s: %s visible but /dev has %v", name, id, devs)
			require.Empty(t, seen[id], "device %s given to both %s and %s", id, seen[id], name)
			seen[id] = name
		}
	}
	require.Len(t, seen, cluster.RealNodeGPUs)

	// A third Pod asking for GPUs waits: the node has no more.
	_, err := env.Client().CoreV1().Pods(ns).Create(ctx, realPod("one-more", script, 1), metav1.CreateOptions{})
	require.NoError(t, err)
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client().CoreV1().Pods(ns).Get(ctx, "one-more", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(t, err, fmt.Sprintf("pod one-more was not reported unschedulable with %d GPUs taken", cluster.RealNodeGPUs))
}
