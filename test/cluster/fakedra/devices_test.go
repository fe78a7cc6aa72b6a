package fakedra

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"
)

func TestDevicesAsNVIDIAPublishesThem(t *testing.T) {
	devs := Devices("node-a", 4, "domain-1")
	require.Len(t, devs, 4)
	uuids := map[string]bool{}
	for i, d := range devs {
		require.Equal(t, DeviceName(i), d.Name)
		require.Equal(t, TypeGPU, *d.Attributes[AttrType].StringValue)
		require.Equal(t, ProductName, *d.Attributes[AttrProductName].StringValue)
		require.Equal(t, int64(i), *d.Attributes[AttrIndex].IntValue)
		require.Equal(t, "domain-1", *d.Attributes[NVLinkDomainAttribute].StringValue)
		require.Equal(t, GPUMemory, d.Capacity[CapacityMemory].Value)
		uuid := *d.Attributes[AttrUUID].StringValue
		require.Regexp(t, `^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`, uuid)
		require.False(t, uuids[uuid], "UUID %s twice", uuid)
		uuids[uuid] = true
	}
	// Stable per node and index, distinct across nodes.
	require.Equal(t, GPUUUID("node-a", 2), *Devices("node-a", 4, "")[2].Attributes[AttrUUID].StringValue)
	require.NotEqual(t, GPUUUID("node-a", 2), GPUUUID("node-b", 2))
}

func TestDeviceIndex(t *testing.T) {
	for _, tc := range []struct {
		name string
		want int
		err  string
	}{
		{name: "gpu-0", want: 0},
		{name: "gpu-3", want: 3},
		{name: "gpu-4", err: `unknown device "gpu-4": this node has gpu-0 to gpu-3`},
		{name: "gpu--1", err: "unknown device"},
		{name: "gpu-01", err: "unknown device"},
		{name: "mig-0", err: "unknown device"},
		{name: "gpu-", err: "unknown device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i, err := deviceIndex(tc.name, 4)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, i)
		})
	}
}

// The DeviceClasses' selectors, compiled and run by the scheduler's own CEL
// library, take the fake GPUs for gpu.nvidia.com and leave them out of
// mig.nvidia.com, and take no other driver's devices.
func TestDeviceClassesSelectByDriverAndType(t *testing.T) {
	gpu := Devices("node-a", 1, "d")[0]
	mig := resourceapi.Device{Name: "gpu-0-mig-1", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrType: {StringValue: ptr.To(TypeMIG)}, "profile": {StringValue: ptr.To("1g.10gb")},
	}}
	classes := map[string]*resourceapi.DeviceClass{}
	for _, c := range DeviceClasses() {
		classes[c.Name] = c
	}
	for _, tc := range []struct {
		class  string
		driver string
		device resourceapi.Device
		want   bool
	}{
		{class: DriverName, driver: DriverName, device: gpu, want: true},
		{class: DriverName, driver: DriverName, device: mig, want: false},
		{class: DriverName, driver: "other.example.com", device: gpu, want: false},
		{class: MIGDeviceClass, driver: DriverName, device: mig, want: true},
		{class: MIGDeviceClass, driver: DriverName, device: gpu, want: false},
	} {
		t.Run(tc.class+"/"+tc.driver+"/"+tc.device.Name, func(t *testing.T) {
			require.Contains(t, classes, tc.class)
			sel := classes[tc.class].Spec.Selectors
			require.Len(t, sel, 1)
			res := cel.GetCompiler(cel.Features{}).CompileCELExpression(sel[0].CEL.Expression, cel.Options{})
			require.Nil(t, res.Error)
			got, _, err := res.DeviceMatches(context.Background(), cel.Device{Driver: tc.driver, Attributes: tc.device.Attributes, Capacity: tc.device.Capacity})
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
