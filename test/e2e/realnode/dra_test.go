package realnode

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/cluster/fakedra"
)

// draScript prints the container's GPU device nodes and
// NVIDIA_VISIBLE_DEVICES, then waits, exiting at once on SIGTERM so a
// graceful delete is quick.
const draScript = `trap 'exit 0' TERM; echo "devices: $(ls /dev | grep nvidia | tr '\n' ' ')"; echo "visible: $NVIDIA_VISIBLE_DEVICES"; echo done; sleep 3600 & wait`

// draPod is a Pod on the real node whose container uses the claim "gpu"
// made from template, as runplane gives a GPU Pod of a DRA spec.
func draPod(name, template string) *corev1.Pod {
	p := realPod(name, draScript, 0)
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: &template}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	return p
}

func gpuTemplate(name string, count int64) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: fakedra.DriverName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
			}}},
		}}},
	}
}

// seenGPUs parses draScript's log: the device nodes and the visible UUIDs.
func seenGPUs(log string) (devs, visible []string) {
	for _, line := range strings.Split(log, "\n") {
		if v, ok := strings.CutPrefix(line, "devices: "); ok {
			devs = strings.Fields(v)
		}
		if v, ok := strings.CutPrefix(line, "visible: "); ok && strings.TrimSpace(v) != "" {
			visible = strings.Split(strings.TrimSpace(v), ",")
		}
	}
	sort.Strings(devs)
	return devs, visible
}

// podClaim is the ResourceClaim made for the Pod's claim "gpu".
func podClaim(t testing.TB, ctx context.Context, ns, pod string) *resourceapi.ResourceClaim {
	t.Helper()
	p, err := env.Client().CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, p.Status.ResourceClaimStatuses, 1, "pod %s: %+v", pod, p.Status.ResourceClaimStatuses)
	name := p.Status.ResourceClaimStatuses[0].ResourceClaimName
	require.NotNil(t, name)
	claim, err := env.Client().ResourceV1().ResourceClaims(ns).Get(ctx, *name, metav1.GetOptions{})
	require.NoError(t, err)
	require.NotNil(t, claim.Status.Allocation, "claim %s not allocated", *name)
	return claim
}

// nodeGPUUUIDs maps the real node's published GPU devices to their uuid
// attribute, read from its ResourceSlices.
func nodeGPUUUIDs(t testing.TB, ctx context.Context) map[string]string {
	t.Helper()
	slices, err := env.Client().ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"spec.nodeName": node.Name, "spec.driver": fakedra.DriverName,
	}.String()})
	require.NoError(t, err)
	uuids := map[string]string{}
	for _, s := range slices.Items {
		require.Equal(t, node.Name, s.Spec.Pool.Name)
		for _, d := range s.Spec.Devices {
			uuids[d.Name] = *d.Attributes[fakedra.AttrUUID].StringValue
		}
	}
	require.Len(t, uuids, cluster.RealNodeGPUs)
	return uuids
}

// requireSeesAllocation checks that the Pod's container sees exactly the
// devices its claim was allocated: their device nodes and, in index order,
// their UUIDs as the ResourceSlice publishes them.
func requireSeesAllocation(t testing.TB, ctx context.Context, ns, pod string, count int) *resourceapi.ResourceClaim {
	t.Helper()
	log := logsWhen(t, ctx, ns, pod, "done")
	claim := podClaim(t, ctx, ns, pod)
	uuids := nodeGPUUUIDs(t, ctx)
	results := claim.Status.Allocation.Devices.Results
	require.Len(t, results, count)
	sort.Slice(results, func(a, b int) bool { return results[a].Device < results[b].Device })
	var wantDevs, wantVisible []string
	for _, r := range results {
		require.Equal(t, fakedra.DriverName, r.Driver)
		require.Equal(t, node.Name, r.Pool)
		wantDevs = append(wantDevs, "nvidia"+strings.TrimPrefix(r.Device, "gpu-"))
		wantVisible = append(wantVisible, uuids[r.Device])
	}
	devs, visible := seenGPUs(log)
	require.Equal(t, wantDevs, devs, "pod %s log:\n%s", pod, log)
	require.Equal(t, wantVisible, visible, "pod %s log:\n%s", pod, log)
	require.FileExists(t, fakedra.SpecFile(node.CDIDir(), claim.UID))
	return claim
}

// A Pod with a claim from a ResourceClaimTemplate of DeviceClass
// gpu.nvidia.com runs on the real node and sees the devices it was
// allocated, through the fake driver's CDI spec; while it holds them a Pod
// wanting every GPU waits, and deleting the first unprepares its claim
// (its CDI spec goes) and frees its devices for the second.
func TestDRAClaimOnRealNode(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := api.DefaultNamespace
	rct := env.Client().ResourceV1().ResourceClaimTemplates(ns)
	for _, tmpl := range []*resourceapi.ResourceClaimTemplate{gpuTemplate("dra-two", 2), gpuTemplate("dra-all", cluster.RealNodeGPUs)} {
		_, err := rct.Create(ctx, tmpl, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = rct.Delete(context.Background(), tmpl.Name, metav1.DeleteOptions{}) })
	}
	pods := env.Client().CoreV1().Pods(ns)
	for _, name := range []string{"dra-two", "dra-all"} {
		// The node's DRA GPUs go back for the tests after this one.
		t.Cleanup(func() {
			_ = pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
	}

	_, err := pods.Create(ctx, draPod("dra-two", "dra-two"), metav1.CreateOptions{})
	require.NoError(t, err)
	two := requireSeesAllocation(t, ctx, ns, "dra-two", 2)

	// Every GPU is more than is free: the scheduler says so.
	_, err = pods.Create(ctx, draPod("dra-all", "dra-all"), metav1.CreateOptions{})
	require.NoError(t, err)
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, "dra-all", metav1.GetOptions{})
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
	require.NoError(t, err, "pod dra-all was not reported unschedulable with 2 of %d DRA GPUs taken", cluster.RealNodeGPUs)

	// A graceful delete: the kubelet removes the Pod only once its claim is
	// unprepared, and the claim made for it goes with it.
	require.NoError(t, pods.Delete(ctx, "dra-two", metav1.DeleteOptions{}))
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := pods.Get(ctx, "dra-two", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	require.NoError(t, err, "pod dra-two was not deleted")
	require.NoFileExists(t, fakedra.SpecFile(node.CDIDir(), two.UID), "claim %s still prepared after its Pod is gone", two.Name)
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := env.Client().ResourceV1().ResourceClaims(ns).Get(ctx, two.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	require.NoError(t, err, "claim %s of the deleted pod dra-two was not deleted", two.Name)

	// Its devices are allocatable again: the waiting Pod gets all of them.
	requireSeesAllocation(t, ctx, ns, "dra-all", cluster.RealNodeGPUs)
}
