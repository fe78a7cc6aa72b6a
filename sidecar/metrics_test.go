package sidecar

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// TestMetricNames: the build info every binary serves, and in_flight spelt
// as the activator spells it (runplane_activator_in_flight).
func TestMetricNames(t *testing.T) {
	m := newMetrics(1)
	require.Equal(t, 1, testutil.CollectAndCount(m.reg, "runplane_build_info"))
	require.Equal(t, 1, testutil.CollectAndCount(m.reg, "runplane_sidecar_in_flight"))
}
