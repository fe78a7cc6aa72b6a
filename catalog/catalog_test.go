package catalog

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

func TestParseSpec(t *testing.T) {
	tests := []struct {
		name, doc string
		wantErr   string
		check     func(t *testing.T, s Spec)
	}{
		{name: "g1.1", doc: "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\n", check: func(t *testing.T, s Spec) {
			assert.Equal(t, corev1.ResourceName("nvidia.com/gpu"), s.GPUResource, "default GPU resource")
			assert.Equal(t, StockPreferred, s.Stock, "default stock")
			assert.Equal(t, int64(1), s.GPU)
			q := s.Resources()["nvidia.com/gpu"]
			assert.Equal(t, int64(1), q.Value(), "gpu resource")
		}},
		{name: "a100.8", doc: "gpu: 8\ngpuResource: example.com/a100\ncpu: 64\nmemory: 512Gi\nstock: Required\n", check: func(t *testing.T, s Spec) {
			assert.Equal(t, StockRequired, s.Stock)
			assert.Equal(t, corev1.ResourceName("example.com/a100"), s.GPUResource)
		}},
		{name: "bad", doc: "gpu: 1\ncpu: 1\nmemory: 1Gi\nstock: Sometimes\n", wantErr: "stock must be Preferred or Required"},
		{name: "nocpu", doc: "gpu: 1\nmemory: 1Gi\n", wantErr: "cpu must be set"},
		{name: "typo", doc: "gpus: 1\ncpu: 1\nmemory: 1Gi\n", wantErr: "unknown field"},
		{name: "neg", doc: "gpu: -1\ncpu: 1\nmemory: 1Gi\n", wantErr: "gpu must be >= 0"},
		{name: "bad/name", doc: "gpu: 1\ncpu: 1\nmemory: 1Gi\n", wantErr: "invalid name"},
		{name: "mig.2", doc: "gpu: 0\ncpu: 4\nmemory: 16Gi\nresources:\n  nvidia.com/mig-1g.10gb: 2\n", check: func(t *testing.T, s Spec) {
			q := s.Resources()["nvidia.com/mig-1g.10gb"]
			assert.Equal(t, int64(2), q.Value(), "MIG slices")
			_, hasGPU := s.Resources()["nvidia.com/gpu"]
			assert.False(t, hasGPU)
		}},
		{name: "several", doc: "gpu: 2\ncpu: 4\nmemory: 16Gi\nnvlink: true\nresources:\n  example.com/nic: 1\n", check: func(t *testing.T, s Spec) {
			assert.True(t, s.NVLink)
			assert.Len(t, s.Resources(), 4)
		}},
		{name: "mig-cpu", doc: "gpu: 0\ncpu: 4\nmemory: 16Gi\nresources:\n  cpu: 2\n", wantErr: "must be an extended resource"},
		{name: "mig-gpu", doc: "gpu: 1\ncpu: 4\nmemory: 16Gi\nresources:\n  nvidia.com/gpu: 2\n", wantErr: "set gpu instead"},
		{name: "mig-half", doc: "gpu: 0\ncpu: 4\nmemory: 16Gi\nresources:\n  nvidia.com/mig-1g.10gb: 500m\n", wantErr: "whole count"},
		{name: "nvlink-one", doc: "gpu: 1\ncpu: 4\nmemory: 16Gi\nnvlink: true\n", wantErr: "nvlink needs gpu >= 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseSpec(tt.name, tt.doc)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			tt.check(t, s)
		})
	}
}

func TestLookupUnknownNamesKeyAndKnownSpecs(t *testing.T) {
	c, err := Parse(map[string]string{"g1.1": "gpu: 1\ncpu: 1\nmemory: 1Gi", "g1.2": "gpu: 2\ncpu: 1\nmemory: 1Gi"})
	require.NoError(t, err)
	_, err = c.Lookup("runplane.io/gpu-spec", "g9")
	require.EqualError(t, err, `label runplane.io/gpu-spec: unknown GPU spec "g9"; known specs: g1.1, g1.2`)
}

// Every resource a spec names must be managed by the extender; the error
// names the spec, the resource and the chart value to set.
func TestCheckManaged(t *testing.T) {
	c, err := Parse(map[string]string{
		"g1":  "gpu: 1\ncpu: \"4\"\nmemory: 16Gi\n",
		"m1":  "gpu: 0\ncpu: \"2\"\nmemory: 8Gi\nresources: {nvidia.com/mig-1g.10gb: 1}\n",
		"amd": "gpu: 1\ngpuResource: amd.com/gpu\ncpu: \"4\"\nmemory: 16Gi\n",
	})
	require.NoError(t, err)
	tests := []struct {
		name    string
		managed []corev1.ResourceName
		wantErr string
	}{
		{"all managed", []corev1.ResourceName{"nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu"}, ""},
		{"an extended resource unmanaged", []corev1.ResourceName{"nvidia.com/gpu", "amd.com/gpu"},
			`catalog spec "m1": resource nvidia.com/mig-1g.10gb is not managed by the runplane extender (managed: nvidia.com/gpu, amd.com/gpu); add it to the chart value scheduler.extender.managedResources`},
		{"a GPU resource unmanaged", []corev1.ResourceName{"nvidia.com/gpu", "nvidia.com/mig-1g.10gb"},
			`catalog spec "amd": resource amd.com/gpu is not managed`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.CheckManaged(tt.managed)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}
