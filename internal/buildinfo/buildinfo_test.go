package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		name, stamped string
		bi            *debug.BuildInfo
		want          Info
	}{
		{"stamped wins", "v1.2.3", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.9.0"}, Settings: vcs},
			Info{Version: "v1.2.3", Revision: "abc123", Modified: true, GoVersion: "go1.26.0"}},
		{"module version", "", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.9.0"}},
			Info{Version: "v0.9.0", GoVersion: "go1.26.0"}},
		{"devel", "", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: vcs[:1]},
			Info{Version: "devel", Revision: "abc123", GoVersion: "go1.26.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, fromBuildInfo(tc.stamped, tc.bi))
		})
	}
	require.Equal(t, "devel", fromBuildInfo("", nil).Version)
	require.Equal(t, "v1.2.3 (abc123, modified) go1.26.0", Info{Version: "v1.2.3", Revision: "abc123", Modified: true, GoVersion: "go1.26.0"}.String())
}

func TestCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collector())
	require.Equal(t, 1, testutil.CollectAndCount(reg, "runplane_build_info"))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	m := mfs[0].GetMetric()[0]
	require.Equal(t, 1.0, m.GetGauge().GetValue())
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	require.Equal(t, Get().Version, labels["version"])
	require.True(t, strings.HasPrefix(labels["goversion"], "go"))
}
