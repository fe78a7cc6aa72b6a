package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/hack/images"
	"github.com/runplane/runplane/test/cluster"
)

// stockDeployment is a Deployment of placeholders of realSpec as a user
// writes it: the webhook turns each Pod into a pause container holding the
// spec (a GPU of the real node), runplane-stock, grace 0, the
// runplane-scheduler.
func stockDeployment(name string, replicas int32) *appsv1.Deployment {
	return stockDeploymentOf(realSpec, name, replicas)
}

// stockDeploymentOf is stockDeployment of the catalog spec spec.
func stockDeploymentOf(spec, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{api.LabelStock: spec, "app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "hold", Image: images.PauseRef}}},
			},
		},
	}
}

// gpuWorkload is a GPU Pod of realSpec as a user writes it: the webhook
// adds the GPU, CPU and memory, the real node's selector and toleration,
// the priority tier and the runplane-scheduler.
func gpuWorkload(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{api.LabelGPUSpec: realSpec}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: images.UserRef, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", `echo "visible: $NVIDIA_VISIBLE_DEVICES"; echo started; exec sleep 3600`}}},
			RestartPolicy: corev1.RestartPolicyNever,
		},
	}
}

// runningPods waits until exactly n live Pods match selector and all are
// Running (the kubelet started their containers), and returns them. Failed
// Pods are not counted: the kubelet rejects a Pod bound to a GPU it has not
// yet taken back from a Pod deleted with grace 0 (UnexpectedAdmissionError),
// and the ReplicaSet replaces it.
func runningPods(t testing.TB, ctx context.Context, selector string, n int) []corev1.Pod {
	t.Helper()
	var running []corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := env.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		running = running[:0]
		live := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
				continue // replaced by its ReplicaSet, if any
			}
			live++
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running = append(running, p)
			}
		}
		return len(running) == n && live == n, nil
	})
	require.NoError(t, err, "%d Pods %s never all Running (%d are)", n, selector, len(running))
	return running
}

// deviceCheckpoint is the part of the kubelet's device-manager checkpoint
// (/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint) that says
// which devices each Pod's containers hold.
type deviceCheckpoint struct {
	Data struct {
		PodDeviceEntries []struct {
			PodUID        string
			ContainerName string
			ResourceName  string
			DeviceIDs     map[string][]string
		}
	}
}

// devicesOf reads from the kubelet's checkpoint the GPUs the Pod holds.
func devicesOf(t *testing.T, uid string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(node.Dir, "kubelet", "device-plugins", "kubelet_internal_checkpoint"))
	require.NoError(t, err)
	var cp deviceCheckpoint
	require.NoError(t, json.Unmarshal(data, &cp))
	var ids []string
	for _, e := range cp.Data.PodDeviceEntries {
		if e.PodUID == uid && e.ResourceName == string(api.DefaultGPUResource) {
			for _, numa := range e.DeviceIDs {
				ids = append(ids, numa...)
			}
		}
	}
	return ids
}

// podCgroup finds the kubelet's cgroup of the Pod on the real node (in
// the pids hierarchy, under the node's cgroup tree); "" when there is none,
// which the kubelet makes so only once every container of the Pod stopped.
func podCgroup(t testing.TB, uid string) string {
	t.Helper()
	var found string
	root := filepath.Join("/sys/fs/cgroup/pids", node.Name)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil // removed while walking
			}
			return err
		}
		if d.IsDir() && d.Name() == "pod"+uid {
			found = path
			return filepath.SkipAll
		}
		return nil
	})
	require.NoError(t, err)
	return found
}

// A GPU Pod of a spec whose every GPU on the real node a placeholder holds
// takes one over through the runplane-scheduler and the extender: the
// placeholder is deleted, the kubelet really stops it (its Pod cgroup goes),
// and the GPU Pod's container gets the very device the placeholder held.
func TestGPUPodTakesOverPlaceholderOnRealNode(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := env.Client()
	_, err := c.AppsV1().Deployments(ns).Create(ctx, stockDeployment("stock-takeover", cluster.RealNodeGPUs), metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.AppsV1().Deployments(ns).Delete(context.Background(), "stock-takeover", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
		_ = c.CoreV1().Pods(ns).Delete(context.Background(), "trainer", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	placeholders := runningPods(t, ctx, "app=stock-takeover", cluster.RealNodeGPUs)
	held := map[string][]string{} // placeholder UID -> its GPUs
	for _, p := range placeholders {
		require.Equal(t, node.Name, p.Spec.NodeName)
		require.Equal(t, api.PriorityClassStock, p.Spec.PriorityClassName)
		require.Equal(t, images.PauseRef, p.Spec.Containers[0].Image)
		uid := string(p.UID)
		held[uid] = devicesOf(t, uid)
		require.Len(t, held[uid], 1, "placeholder %s holds %v", p.Name, held[uid])
		require.NotEmpty(t, podCgroup(t, uid), "placeholder %s runs without a Pod cgroup", p.Name)
	}

	_, err = c.CoreV1().Pods(ns).Create(ctx, gpuWorkload("trainer"), metav1.CreateOptions{})
	require.NoError(t, err)
	// Running, or a clear failure: the kubelet rejects a Pod bound to a
	// GPU it has not yet taken back (UnexpectedAdmissionError).
	var trainer *corev1.Pod
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		trainer, err = c.CoreV1().Pods(ns).Get(ctx, "trainer", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if trainer.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("the kubelet failed the GPU Pod: %s: %s", trainer.Status.Reason, trainer.Status.Message)
		}
		return trainer.Status.Phase == corev1.PodRunning, nil
	})
	require.NoError(t, err, "the GPU Pod never ran")
	log := logsWhen(t, ctx, ns, "trainer", "started")
	require.Equal(t, api.SchedulerName, trainer.Spec.SchedulerName)
	require.Equal(t, node.Name, trainer.Spec.NodeName)

	// The claim names the placeholder it took (node/namespace/name/uid).
	claim := strings.Split(trainer.Annotations[api.AnnotationClaimedStock], "/")
	require.Len(t, claim, 4, "claimed-stock %q", trainer.Annotations[api.AnnotationClaimedStock])
	require.Equal(t, []string{node.Name, ns}, claim[:2])
	taken, uid := claim[2], claim[3]
	require.Contains(t, held, uid, "the claim names no placeholder of the Deployment")

	// The placeholder really terminates: gone from the API and, on the
	// node, its Pod cgroup removed by the kubelet once its container stopped.
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, taken, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && string(p.UID) != uid, err
	})
	require.NoError(t, err, "placeholder %s still in the API", taken)
	var cg string
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		cg = podCgroup(t, uid)
		return cg == "", nil
	})
	require.NoError(t, err, "the kubelet never stopped placeholder %s (cgroup %s)", taken, cg)

	// The GPU Pod's container sees the device the placeholder held.
	require.Contains(t, log, fmt.Sprintf("visible: %s\n", held[uid][0]), "placeholder %s held %v", taken, held[uid])
	require.Equal(t, held[uid], devicesOf(t, string(trainer.UID)))
	// The other placeholders keep theirs and run on.
	for _, p := range placeholders {
		if string(p.UID) != uid {
			require.NotEmpty(t, podCgroup(t, string(p.UID)), "placeholder %s stopped too", p.Name)
		}
	}
}
