package chart_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	"github.com/runplane/runplane/webhook/mutate"
)

// The chart's webhook.sidecarResources, as the webhook parses its
// -sidecar-resources flag, are the webhook's own defaults (make dev and
// tests use those).
func TestSidecarResourcesMirrorGo(t *testing.T) {
	b, err := os.ReadFile("values.yaml")
	require.NoError(t, err)
	var values struct {
		Webhook struct {
			SidecarResources json.RawMessage `json:"sidecarResources"`
		} `json:"webhook"`
	}
	require.NoError(t, yaml.Unmarshal(b, &values))
	got, err := mutate.ParseSidecarResources(string(values.Webhook.SidecarResources))
	require.NoError(t, err)
	want := mutate.DefaultSidecarResources()
	require.True(t, equality.Semantic.DeepEqual(want, got), "values.yaml webhook.sidecarResources %v, the webhook's defaults %v", got, want)
}
