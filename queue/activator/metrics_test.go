package activator

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKnownPoolStartsCountersAtZero: once the activator knows a pool its
// event counters exist at 0, so the first loss or dead letter is an
// increase (a series born at 1 is not) and a panel shows 0, not no data.
func TestKnownPoolStartsCountersAtZero(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := newMetrics(reg)
	m.knownPool("team-a", "llm")
	families, err := reg.Gather()
	require.NoError(t, err)
	series := map[string]int{}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == "team-a" && labels["pool"] == "llm" && s.GetCounter() != nil {
				assert.Zero(t, s.GetCounter().GetValue(), f.GetName())
				series[f.GetName()]++
			}
		}
	}
	for _, name := range []string{
		"runplane_activator_lost_invocations_total", "runplane_activator_redeliveries_total", "runplane_activator_dead_lettered_total",
		"runplane_activator_retries_total", "runplane_activator_handed_back_total", "runplane_activator_silent_workers_total",
		"runplane_activator_invocations_accepted_total", "runplane_activator_dispatches_total",
	} {
		assert.Equal(t, 1, series[name], name)
	}
	assert.Equal(t, 2, series["runplane_activator_scale_total"], "one series per direction")
}
