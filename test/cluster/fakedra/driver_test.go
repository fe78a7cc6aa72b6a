package fakedra

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const node = "node-a"

// claim is an allocated claim with results (driver, pool, device).
func claim(uid string, results ...[3]string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-" + uid, UID: types.UID(uid)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, r := range results {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: r[0], Pool: r[1], Device: r[2]})
	}
	return c
}

func gpu(dev string) [3]string { return [3]string{DriverName, node, dev} }

func newDriver(t *testing.T) *Driver {
	return &Driver{NodeName: node, Count: 4, CDIDir: t.TempDir()}
}

func readSpec(t *testing.T, d *Driver, uid types.UID) cdispec.Spec {
	t.Helper()
	data, err := os.ReadFile(specFile(d.CDIDir, uid))
	require.NoError(t, err)
	var spec cdispec.Spec
	require.NoError(t, json.Unmarshal(data, &spec))
	return spec
}

func TestPrepareWritesTheClaimsCDISpec(t *testing.T) {
	d := newDriver(t)
	c := claim("uid-1", gpu("gpu-2"), gpu("gpu-0"), [3]string{"net.example.com", node, "eth0"})
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	require.NoError(t, err)
	require.NoError(t, res["uid-1"].Err)
	require.Equal(t, []kubeletplugin.Device{
		{Requests: []string{"gpu"}, PoolName: node, DeviceName: "gpu-0", CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=uid-1-gpu-0"}},
		{Requests: []string{"gpu"}, PoolName: node, DeviceName: "gpu-2", CDIDeviceIDs: []string{"k8s.gpu.nvidia.com/claim=uid-1-gpu-2"}},
	}, res["uid-1"].Devices)

	spec := readSpec(t, d, "uid-1")
	require.Equal(t, "k8s.gpu.nvidia.com/claim", spec.Kind)
	require.NotEmpty(t, spec.Version)
	require.Equal(t, []string{"NVIDIA_VISIBLE_DEVICES=" + GPUUUID(node, 0) + "," + GPUUUID(node, 2)}, spec.ContainerEdits.Env)
	require.Len(t, spec.Devices, 2)
	for i, want := range []struct{ name, path string }{{"uid-1-gpu-0", "/dev/nvidia0"}, {"uid-1-gpu-2", "/dev/nvidia2"}} {
		require.Equal(t, want.name, spec.Devices[i].Name)
		require.Equal(t, []*cdispec.DeviceNode{{Path: want.path, HostPath: "/dev/null", Permissions: "rw"}}, spec.Devices[i].ContainerEdits.DeviceNodes)
	}

	// The kubelet may prepare again (after a restart): same answer.
	again, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	require.NoError(t, err)
	require.Equal(t, res, again)
}

func TestPrepareRefuses(t *testing.T) {
	notAllocated := claim("uid-x")
	notAllocated.Status.Allocation = nil
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		err   string
	}{
		{name: "device of another claim", claim: claim("uid-2", gpu("gpu-1")), err: "device gpu-1 is prepared for claim uid-1"},
		{name: "another node's pool", claim: claim("uid-2", [3]string{DriverName, "node-b", "gpu-3"}), err: `device gpu-3 is in pool "node-b", this node's pool is "node-a"`},
		{name: "unknown device", claim: claim("uid-2", gpu("gpu-7")), err: `unknown device "gpu-7"`},
		{name: "not allocated", claim: notAllocated, err: "claim ns/c-uid-x is not allocated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver(t)
			_, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim("uid-1", gpu("gpu-1"))})
			require.NoError(t, err)
			res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{tc.claim})
			require.NoError(t, err)
			require.ErrorContains(t, res[tc.claim.UID].Err, tc.err)
			require.NoFileExists(t, specFile(d.CDIDir, tc.claim.UID))
		})
	}
}

// Unpreparing frees the devices for the next claim, also for a driver
// restarted in between (its state is the spec files), and is idempotent.
func TestUnprepareFreesTheDevices(t *testing.T) {
	d := newDriver(t)
	ctx := context.Background()
	res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("uid-1", gpu("gpu-3"))})
	require.NoError(t, err)
	require.NoError(t, res["uid-1"].Err)

	restarted := &Driver{NodeName: node, Count: 4, CDIDir: d.CDIDir}
	res, err = restarted.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("uid-2", gpu("gpu-3"))})
	require.NoError(t, err)
	require.ErrorContains(t, res["uid-2"].Err, "device gpu-3 is prepared for claim uid-1")

	gone := []kubeletplugin.NamespacedObject{{UID: "uid-1"}, {UID: "never-prepared"}}
	for range 2 {
		un, err := restarted.UnprepareResourceClaims(ctx, gone)
		require.NoError(t, err)
		require.Equal(t, map[types.UID]error{"uid-1": nil, "never-prepared": nil}, un)
	}
	require.NoFileExists(t, specFile(d.CDIDir, "uid-1"))

	res, err = restarted.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim("uid-2", gpu("gpu-3"))})
	require.NoError(t, err)
	require.NoError(t, res["uid-2"].Err)
}

func TestStartRejectsMissingOptions(t *testing.T) {
	_, err := (&Driver{NodeName: node, CDIDir: t.TempDir()}).Start(context.Background())
	require.ErrorContains(t, err, "want Client, NodeName, RegistryDir, PluginDir, CDIDir and a positive Count")
}
