package catalog

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSpec(t *testing.T) {
	tests := []struct {
		name, doc string
		wantErr   string
		check     func(t *testing.T, s Spec)
	}{
		{name: "g1.1", doc: "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\n", check: func(t *testing.T, s Spec) {
			if s.GPUResource != "nvidia.com/gpu" || s.Stock != StockPreferred || s.GPU != 1 {
				t.Errorf("defaults not applied: %+v", s)
			}
			r := s.Resources()
			if q := r["nvidia.com/gpu"]; q.Value() != 1 {
				t.Errorf("gpu resource = %v", q.String())
			}
		}},
		{name: "a100.8", doc: "gpu: 8\ngpuResource: example.com/a100\ncpu: 64\nmemory: 512Gi\nstock: Required\n", check: func(t *testing.T, s Spec) {
			if s.Stock != StockRequired || s.GPUResource != "example.com/a100" {
				t.Errorf("got %+v", s)
			}
		}},
		{name: "bad", doc: "gpu: 1\ncpu: 1\nmemory: 1Gi\nstock: Sometimes\n", wantErr: "stock must be Preferred or Required"},
		{name: "nocpu", doc: "gpu: 1\nmemory: 1Gi\n", wantErr: "cpu must be set"},
		{name: "typo", doc: "gpus: 1\ncpu: 1\nmemory: 1Gi\n", wantErr: "unknown field"},
		{name: "neg", doc: "gpu: -1\ncpu: 1\nmemory: 1Gi\n", wantErr: "gpu must be >= 0"},
		{name: "bad/name", doc: "gpu: 1\ncpu: 1\nmemory: 1Gi\n", wantErr: "invalid name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseSpec(tt.name, tt.doc)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
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
	want := `label runplane.io/gpu-spec: unknown GPU spec "g9"; known specs: g1.1, g1.2`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %s", err, want)
	}
}
