package profile

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"
)

func TestSchedulerConfig(t *testing.T) {
	cfg, err := SchedulerConfig(Options{URLPrefix: "https://127.0.0.1:8443", CAData: []byte("pem")})
	require.NoError(t, err)
	p := cfg.Profiles[0]
	has := func(set configv1.PluginSet, name string) bool {
		for _, pl := range set.Disabled {
			if pl.Name == name {
				return true
			}
		}
		return false
	}
	ext := cfg.Extenders[0]
	checks := []struct {
		what string
		ok   bool
	}{
		{"schedulerName runplane-scheduler", *p.SchedulerName == "runplane-scheduler"},
		{"NodeResourcesFit filter disabled", has(p.Plugins.Filter, "NodeResourcesFit")},
		{"NodeResourcesFit score disabled", has(p.Plugins.Score, "NodeResourcesFit")},
		{"percentageOfNodesToScore 100", *cfg.PercentageOfNodesToScore == 100 && *p.PercentageOfNodesToScore == 100},
		{"verbs", ext.FilterVerb == "filter" && ext.PrioritizeVerb == "prioritize" && ext.BindVerb == "bind"},
		{"https with CA", ext.EnableHTTPS && string(ext.TLSConfig.CAData) == "pem"},
		{"nodeCacheCapable", ext.NodeCacheCapable},
		{"managed nvidia.com/gpu ignored by scheduler", len(ext.ManagedResources) == 1 &&
			ext.ManagedResources[0].Name == "nvidia.com/gpu" && ext.ManagedResources[0].IgnoredByScheduler},
		{"weight", ext.Weight == DefaultWeight},
		{"no leader election by default", !*cfg.LeaderElection.LeaderElect},
	}
	for _, c := range checks {
		assert.True(t, c.ok, "%s: not so in %+v", c.what, cfg)
	}
	data, err := YAML(cfg)
	require.NoError(t, err)
	require.Contains(t, string(data), "kind: KubeSchedulerConfiguration")
	require.Contains(t, string(data), "caData: cGVt")
}

func TestSchedulerConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"http URL", Options{URLPrefix: "http://x", CAData: []byte("x")}, "must be an https:// URL"},
		{"no CA", Options{URLPrefix: "https://x"}, "CAData or CAFile is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := SchedulerConfig(tt.opts)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// More managed resources (MIG slices) are listed after the GPU resource,
// each ignored by the scheduler's own fit, the GPU resource once.
func TestSchedulerConfigManagedResources(t *testing.T) {
	cfg, err := SchedulerConfig(Options{URLPrefix: "https://127.0.0.1:8443", CAData: []byte("pem"),
		ManagedResources: []string{"nvidia.com/mig-1g.10gb", "nvidia.com/gpu"}})
	require.NoError(t, err)
	require.Equal(t, []configv1.ExtenderManagedResource{
		{Name: "nvidia.com/gpu", IgnoredByScheduler: true},
		{Name: "nvidia.com/mig-1g.10gb", IgnoredByScheduler: true},
	}, cfg.Extenders[0].ManagedResources)
}

// TestYAMLOnlyNamesUsedExtensionPoints: a kube-scheduler of an older minor
// refuses (strict decoding) an extension point its types do not have, and
// the current types write every one (1.35 refused 1.37's placementGenerate,
// 1.36 its podGroupPostFilter), so YAML writes only those the profile sets.
func TestYAMLOnlyNamesUsedExtensionPoints(t *testing.T) {
	cfg, err := SchedulerConfig(Options{URLPrefix: "https://127.0.0.1:8443", CAData: []byte("pem")})
	require.NoError(t, err)
	data, err := YAML(cfg)
	require.NoError(t, err)
	var back configv1.KubeSchedulerConfiguration
	require.NoError(t, yaml.UnmarshalStrict(data, &back), "YAML:\n%s", data)
	assert.Equal(t, cfg, &back, "YAML loses nothing the configuration sets")
	var doc struct {
		Profiles []struct {
			Plugins map[string]configv1.PluginSet `json:"plugins"`
		} `json:"profiles"`
	}
	require.NoError(t, yaml.Unmarshal(data, &doc), "YAML:\n%s", data)
	require.Len(t, doc.Profiles, 1)
	points := make([]string, 0, len(doc.Profiles[0].Plugins))
	for p := range doc.Profiles[0].Plugins {
		points = append(points, p)
	}
	assert.ElementsMatch(t, []string{"preFilter", "filter", "preScore", "score"}, points, "YAML:\n%s", data)
	assert.Equal(t, []configv1.Plugin{{Name: "NodeResourcesFit"}}, doc.Profiles[0].Plugins["filter"].Disabled)
}

// With DRA specs the extender manages no resource, so the scheduler asks it
// about every Pod (a DRA Pod requests none), and DynamicResources stays on.
func TestSchedulerConfigDRA(t *testing.T) {
	cfg, err := SchedulerConfig(Options{URLPrefix: "https://127.0.0.1:8443", CAData: []byte("pem"),
		ManagedResources: []string{"nvidia.com/mig-1g.10gb"}, DRA: true})
	require.NoError(t, err)
	require.Empty(t, cfg.Extenders[0].ManagedResources)
	for _, set := range []configv1.PluginSet{cfg.Profiles[0].Plugins.PreFilter, cfg.Profiles[0].Plugins.Filter, cfg.Profiles[0].Plugins.Reserve, cfg.Profiles[0].Plugins.PreBind} {
		for _, p := range set.Disabled {
			require.NotEqual(t, "DynamicResources", p.Name)
		}
	}
}
