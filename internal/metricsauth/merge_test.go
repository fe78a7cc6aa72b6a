package metricsauth

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMergeKeepsTheScrape: a family both registries carry (the Go
// collector, when controller-runtime's controller package is linked) is
// served once, not a failed scrape.
func TestMergeKeepsTheScrape(t *testing.T) {
	own, shared := prometheus.NewRegistry(), prometheus.NewRegistry()
	own.MustRegister(collectors.NewGoCollector(), prometheus.NewCounter(prometheus.CounterOpts{Name: "runplane_own_total"}))
	shared.MustRegister(collectors.NewGoCollector(), prometheus.NewCounter(prometheus.CounterOpts{Name: "shared_total"}))
	_, err := prometheus.Gatherers{own, shared}.Gather()
	require.Error(t, err, "what prometheus.Gatherers makes of it")

	mfs, err := Merge(own, shared).Gather()
	require.NoError(t, err)
	count := map[string]int{}
	for _, mf := range mfs {
		count[mf.GetName()]++
	}
	assert.Equal(t, 1, count["go_goroutines"])
	assert.Equal(t, 1, count["runplane_own_total"])
	assert.Equal(t, 1, count["shared_total"])
}
