package chart_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTracingValues: no OTLP endpoint by default (nothing is exported); an
// endpoint reaches the queue's configuration with its sample ratio; a ratio
// that samples nothing or more than everything is refused at render, naming
// the key.
func TestTracingValues(t *testing.T) {
	needHelm(t)
	assert.Empty(t, queueConfig(t, parse(t, mustRender(t))).Tracing.Endpoint, "tracing is off by default")
	tr := queueConfig(t, parse(t, mustRender(t, "--set-json", `tracing={"otlpEndpoint":"otel.monitoring:4317","sampleRatio":0.25}`))).Tracing
	assert.Equal(t, "otel.monitoring:4317", tr.Endpoint)
	assert.InDelta(t, 0.25, tr.SampleRatio, 0)
	for _, ratio := range []string{"0", "1.5"} {
		_, err := render(t, "--set-json", `tracing={"otlpEndpoint":"otel:4317","sampleRatio":`+ratio+`}`)
		require.ErrorContains(t, err, "/tracing/sampleRatio", "ratio %s", ratio)
	}
}
