package extender

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/extender/ledger"
)

// TestBindFailureReasonsStartAtZero: every bind failure reason has a series
// at 0 before the first failure, so that failure is an increase (the
// RunplaneExtenderBindFailures alert and the dashboard see it) and the
// dashboard shows 0, not no data.
func TestBindFailureReasonsStartAtZero(t *testing.T) {
	m := newMetrics(ledger.New(ledger.Options{}))
	n, err := testutil.GatherAndCount(m.registry, "runplane_extender_bind_failures_total")
	require.NoError(t, err)
	require.Equal(t, len(bindFailureReasons()), n)
	for _, r := range bindFailureReasons() {
		require.Zero(t, testutil.ToFloat64(m.bindFailures.WithLabelValues(r)), r)
	}
}
