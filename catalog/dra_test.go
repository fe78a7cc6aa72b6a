package catalog

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	resourcev1 "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"
)

func TestParseDRASpec(t *testing.T) {
	const base = "cpu: 4\nmemory: 16Gi\n"
	tests := []struct {
		name, doc string
		wantErr   string
		check     func(t *testing.T, s Spec)
	}{
		{name: "h100.1", doc: base + "dra: {}\n", check: func(t *testing.T, s Spec) {
			assert.True(t, s.IsDRA())
			assert.Equal(t, GPUDeviceClass, s.DRA.DeviceClassName, "default class")
			assert.Equal(t, int64(1), s.DRA.Count, "default count")
			_, hasGPU := s.Resources()["nvidia.com/gpu"]
			assert.False(t, hasGPU, "no extended resource for a DRA spec")
			assert.Len(t, s.Resources(), 2, "cpu and memory only")
		}},
		{name: "h100.8", doc: base + "dra:\n  count: 8\n  sameNVLinkDomain: true\n  selectors:\n" +
			"  - device.attributes[\"gpu.nvidia.com\"].productName == \"NVIDIA H100 80GB HBM3\"\n" +
			"  - device.capacity[\"gpu.nvidia.com\"].memory.compareTo(quantity(\"80Gi\")) >= 0\n",
			check: func(t *testing.T, s Spec) {
				assert.Equal(t, int64(8), s.DRA.Count)
				assert.Len(t, s.DRA.Selectors, 2)
			}},
		{name: "mig.1g", doc: base + "dra: {migProfile: 1g.10gb, count: 2}\n", check: func(t *testing.T, s Spec) {
			assert.Equal(t, MIGDeviceClass, s.DRA.DeviceClassName, "MIG default class")
		}},
		{name: "own-class", doc: base + "dra: {deviceClassName: example.com-gpu}\n", check: func(t *testing.T, s Spec) {
			assert.Equal(t, "example.com-gpu", s.DRA.DeviceClassName)
		}},
		{name: "with-gpu", doc: base + "gpu: 1\ndra: {}\n", wantErr: "gpu must be 0 or absent with dra"},
		{name: "with-res", doc: base + "gpuResource: amd.com/gpu\ndra: {}\n", wantErr: "gpuResource does not apply with dra"},
		{name: "with-ext", doc: base + "resources: {nvidia.com/mig-1g.10gb: 1}\ndra: {}\n", wantErr: "resources (extended resources) do not mix with dra"},
		{name: "with-nvl", doc: base + "nvlink: true\ndra: {count: 2}\n", wantErr: "use dra.sameNVLinkDomain"},
		{name: "Upper", doc: base + "dra: {}\n", wantErr: "its ResourceClaimTemplate is runplane-Upper"},
		{name: "neg", doc: base + "dra: {count: -1}\n", wantErr: "dra.count must be 1 to 32, got -1"},
		{name: "many", doc: base + "dra: {count: 33}\n", wantErr: "dra.count must be 1 to 32, got 33"},
		{name: "nvl1", doc: base + "dra: {sameNVLinkDomain: true}\n", wantErr: "dra.sameNVLinkDomain needs dra.count >= 2"},
		{name: "badmig", doc: base + "dra: {migProfile: '1g\" || true'}\n", wantErr: "dra.migProfile must be a MIG profile such as 1g.10gb"},
		{name: "badclass", doc: base + "dra: {deviceClassName: GPU_Class}\n", wantErr: "dra.deviceClassName must be a DeviceClass name"},
		{name: "typo", doc: base + "dra: {cuont: 2}\n", wantErr: "unknown field"},
		{name: "syntax", doc: base + "dra:\n  selectors: ['device.attributes[\"gpu.nvidia.com\"].productName ==']\n", wantErr: "dra.selectors[0]"},
		{name: "notbool", doc: base + "dra:\n  selectors: ['device.driver']\n", wantErr: "not a CEL device selector"},
		{name: "unknownvar", doc: base + "dra:\n  selectors: ['gpu.productName == \"x\"']\n", wantErr: "undeclared reference"},
		{name: "empty", doc: base + "dra:\n  selectors: ['']\n", wantErr: "empty expression"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseSpec(tt.name, tt.doc)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.ErrorContains(t, err, `catalog spec "`+tt.name+`"`, "the error names the spec")
				return
			}
			require.NoError(t, err)
			tt.check(t, s)
		})
	}
}

func TestDRASelectorLimits(t *testing.T) {
	long := "device.driver == \"" + strings.Repeat("a", resourcev1.CELSelectorExpressionMaxLength) + "\""
	_, err := ParseSpec("long", "cpu: 1\nmemory: 1Gi\ndra:\n  selectors: ['"+long+"']\n")
	require.ErrorContains(t, err, "longer than 10240 characters")

	many := "cpu: 1\nmemory: 1Gi\ndra:\n  migProfile: 1g.10gb\n  selectors:\n" + strings.Repeat("  - device.driver == \"gpu.nvidia.com\"\n", 32)
	_, err = ParseSpec("many", many)
	require.ErrorContains(t, err, "dra.selectors: at most 32 (with migProfile's), got 33")
}

func TestClaimTemplate(t *testing.T) {
	s, err := ParseSpec("h100.2", "cpu: 4\nmemory: 16Gi\ndra:\n  count: 2\n  migProfile: 3g.40gb\n  sameNVLinkDomain: true\n"+
		"  selectors: ['device.attributes[\"gpu.nvidia.com\"].architecture == \"Hopper\"']\n")
	require.NoError(t, err)
	tpl := s.ClaimTemplate("team-a")
	assert.Equal(t, "runplane-h100.2", tpl.Name)
	assert.Equal(t, "team-a", tpl.Namespace)
	assert.Equal(t, map[string]string{"app.kubernetes.io/managed-by": "runplane-controller", "runplane.io/gpu-spec": "h100.2"}, tpl.Labels)
	want := resourcev1.DeviceClaim{
		Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{
			DeviceClassName: "mig.nvidia.com",
			AllocationMode:  resourcev1.DeviceAllocationModeExactCount,
			Count:           2,
			Selectors: []resourcev1.DeviceSelector{
				{CEL: &resourcev1.CELDeviceSelector{Expression: `device.attributes["gpu.nvidia.com"].architecture == "Hopper"`}},
				{CEL: &resourcev1.CELDeviceSelector{Expression: `device.attributes["gpu.nvidia.com"].profile == "3g.40gb"`}},
			},
		}}},
		Constraints: []resourcev1.DeviceConstraint{{Requests: []string{"gpu"}, MatchAttribute: ptr.To(resourcev1.FullyQualifiedName("runplane.io/nvlinkDomain"))}},
	}
	assert.Equal(t, want, tpl.Spec.Spec.Devices)
	// The MIG profile's selector is compiled like the spec's own.
	require.NoError(t, checkSelector(celCompilerForTest(), tpl.Spec.Spec.Devices.Requests[0].Exactly.Selectors[1].CEL.Expression))

	tpl.Spec.Spec.Devices.Requests[0].Exactly.Selectors[0].CEL.Expression = "changed"
	assert.Equal(t, `device.attributes["gpu.nvidia.com"].architecture == "Hopper"`, s.DRA.Selectors[0], "the template shares nothing with the spec")
}

func celCompilerForTest() celCompiler { return dracel.GetCompiler(dracel.Features{}) }
