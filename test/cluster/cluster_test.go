package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/test/cluster"
)

var env *cluster.Cluster

// envPanicChild makes the test binary start a cluster and panic: the
// child half of TestNoProcessOutlivesAPanic.
const envPanicChild = "RUNPLANE_CLUSTER_PANIC_CHILD"

func TestMain(m *testing.M) {
	if pidFile := os.Getenv(envPanicChild); pidFile != "" {
		panicWithCluster(pidFile)
	}
	cluster.Main(m, cluster.Options{Nodes: []cluster.Node{
		{Name: "gpu-0", GPUs: 8},
		{Name: "gpu-1", GPUs: 8, Labels: map[string]string{"pool": "b"}},
	}}, func(c *cluster.Cluster) { env = c })
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func gpuPodSpec(gpus int64) corev1.PodSpec {
	return corev1.PodSpec{
		InitContainers: []corev1.Container{{
			Name: "sidecar", Image: "sidecar", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		}},
		Containers: []corev1.Container{{
			Name: "main", Image: "main",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI), corev1.ResourceCPU: resource.MustParse("1")},
				Limits:   corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)},
			},
		}},
	}
}

func TestNodesAreReadyWithGPUs(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	nodes, err := env.Client().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, nodes.Items, 2, "got %d nodes, want 2", len(nodes.Items))
	for _, n := range nodes.Items {
		gpu := n.Status.Allocatable["nvidia.com/gpu"]
		assert.EqualValues(t, 8, gpu.Value(), "node %s: allocatable nvidia.com/gpu = %s, want 8", n.Name, gpu.String())
	}
	v, err := env.Client().Discovery().ServerVersion()
	require.NoError(t, err)
	assert.Equal(t, cluster.KubernetesVersion, v.GitVersion, "apiserver version %q, want %q", v.GitVersion, cluster.KubernetesVersion)
}

func TestGPUDeploymentWithNativeSidecarRuns(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	ns := env.Namespace(t, "")
	labels := map[string]string{"app": "gpu"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: gpuPodSpec(4)},
		},
	}
	_, err := env.Client().AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{})
	require.NoError(t, err)
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := env.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=gpu"})
		if err != nil {
			return false, err
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
				running++
			}
		}
		return running == 3, nil
	})
	if err != nil {
		pods, _ := env.Client().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		events, _ := env.Client().CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		for _, e := range events.Items {
			t.Logf("event %s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message)
		}
		for _, p := range pods.Items {
			t.Logf("pod %s on %q: %s %+v %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.InitContainerStatuses, p.Status.Conditions)
		}
		t.Fatalf("3 GPU Pods with a native sidecar did not reach Running: %v", err)
	}
	pods, _ := env.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=gpu"})
	for _, p := range pods.Items {
		if assert.Len(t, p.Status.InitContainerStatuses, 1, "pod %s: native sidecar", p.Name) {
			assert.NotNil(t, p.Status.InitContainerStatuses[0].State.Running, "pod %s: native sidecar not running", p.Name)
		}
	}
}

func TestPodThatCannotFitStaysPending(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	ns := env.Namespace(t, "")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "too-big", Namespace: ns}, Spec: gpuPodSpec(16)}
	_, err := env.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	waitForEvent(t, ctx, ns, "too-big", "FailedScheduling", "Insufficient nvidia.com/gpu")
	got, err := env.Client().CoreV1().Pods(ns).Get(ctx, "too-big", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.PodPending, got.Status.Phase)
	assert.Empty(t, got.Spec.NodeName, "unbound")
}

func waitForEvent(t *testing.T, ctx context.Context, ns, object, reason, message string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		events, err := env.Client().CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + object})
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, e := range events.Items {
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == reason && strings.Contains(e.Message, message) {
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(t, err, "no %s event containing %q on %s (seen: %v)", reason, message, object, seen)
}

func TestPVCIsBoundAndPodMountingItRuns(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	ns := env.Namespace(t, "")
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	_, err := env.Client().CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
	require.NoError(t, err)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "mounter", Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: "main", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes:    []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}},
		},
	}
	_, err = env.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client().CoreV1().Pods(ns).Get(ctx, "mounter", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.Phase == corev1.PodRunning, nil
	})
	require.NoError(t, err, "pod mounting a PVC did not run")
	got, err := env.Client().CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.ClaimBound, got.Status.Phase, "PVC phase %s, want Bound", got.Status.Phase)
}

func TestSecondSchedulerProfile(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	ns := env.Namespace(t, "")
	proc, err := env.StartScheduler(ctx, &configv1.KubeSchedulerConfiguration{
		Profiles: []configv1.KubeSchedulerProfile{{SchedulerName: ptr.To("second-scheduler")}},
	})
	require.NoError(t, err)
	defer proc.Stop()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "second", Namespace: ns},
		Spec:       corev1.PodSpec{SchedulerName: "second-scheduler", Containers: []corev1.Container{{Name: "main", Image: "main"}}},
	}
	_, err = env.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	waitForEvent(t, ctx, ns, "second", "Scheduled", "Successfully assigned")
	proc.Stop()
	exited, _ := proc.Exited()
	assert.True(t, exited, "scheduler process still running after Stop")
}

func TestProcessesLogToDir(t *testing.T) {
	for _, p := range env.Processes() {
		assert.FileExists(t, p.LogPath, "%s log file", p.Name)
	}
}

func panicWithCluster(pidFile string) {
	// The cluster dir sits in the parent test's temp dir, which removes it.
	c, err := cluster.Start(context.Background(), cluster.Options{
		Nodes: []cluster.Node{{Name: "n", GPUs: 1}}, Dir: filepath.Join(filepath.Dir(pidFile), "cluster"),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	var pids []string
	for _, p := range c.Processes() {
		pids = append(pids, strconv.Itoa(p.Pid()))
	}
	if err := os.WriteFile(pidFile, []byte(strings.Join(pids, "\n")), 0o644); err != nil {
		os.Exit(4)
	}
	panic("a test panicked while its cluster was running")
}

func TestNoProcessOutlivesAPanic(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second cluster")
	}
	var pidFile string
	var out []byte
	var err error
	// What is tested is what follows a panic; a child whose cluster did not
	// start (exit 3, at load) never got there: it is tried once more.
	for try := 1; ; try++ {
		pidFile = t.TempDir() + "/pids"
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envPanicChild+"="+pidFile)
		out, err = cmd.CombinedOutput()
		var exit *exec.ExitError
		if try == 2 || !errors.As(err, &exit) || exit.ExitCode() != 3 {
			break
		}
		t.Logf("the child's cluster did not start, trying again:\n%s", out)
	}
	require.Error(t, err, "child did not panic as planned:\n%s", out)
	require.Contains(t, string(out), "a test panicked", "child did not panic as planned")
	data, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	pids := strings.Fields(string(data))
	require.GreaterOrEqual(t, len(pids), 5, "child's processes: etcd, apiserver, kcm, scheduler, kwok")
	ctx := ctxFor(t, 15*time.Second)
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		for _, s := range pids {
			pid, _ := strconv.Atoi(s)
			if syscall.Kill(pid, 0) == nil {
				return false, nil
			}
		}
		return true, nil
	})
	require.NoError(t, err, "control-plane processes %v outlived the panicking test binary", pids)
}

// A deleted Pod stays Terminating for min(its grace period, the bound),
// as a kubelet would keep it (stages/pod-delete-graceful.yaml), not a
// random part of its grace period; kwok's delay annotation overrides it.
func TestDeletedPodTerminatesLikeAKubelet(t *testing.T) {
	ctx := ctxFor(t, 2*time.Minute)
	ns := env.Namespace(t, "")
	c := env.Client()
	bound := cluster.DefaultPodTerminationBound
	tests := []struct {
		name  string
		grace int64
		delay string // the kwok annotation, if any
		want  time.Duration
	}{
		{"grace below the bound", 1, "", time.Second},
		{"grace above the bound", 30, "", bound},
		{"annotation overrides", 30, "500ms", 500 * time.Millisecond},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			name := fmt.Sprintf("term-%d", i)
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: gpuPodSpec(0)}
			pod.Spec.TerminationGracePeriodSeconds = ptr.To(tt.grace)
			if tt.delay != "" {
				pod.Annotations = map[string]string{"pod-delete.stage.kwok.x-k8s.io/delay": tt.delay}
			}
			_, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
			require.NoError(t, err)
			require.EventuallyWithT(t, func(t *assert.CollectT) {
				p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
				require.NoError(t, err)
				require.Equal(t, corev1.PodRunning, p.Status.Phase)
			}, time.Minute, 100*time.Millisecond)
			began := time.Now()
			require.NoError(t, c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}))
			// Gone within the expected time and a margin for a loaded
			// machine, far below the grace period where that is longer.
			err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, tt.want+8*time.Second, true, func(ctx context.Context) (bool, error) {
				_, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
				return apierrors.IsNotFound(err), nil
			})
			require.NoError(t, err, "the Pod was not removed")
			require.GreaterOrEqual(t, time.Since(began), tt.want-100*time.Millisecond, "the Pod went before a kubelet would have removed it")
		})
	}
}
