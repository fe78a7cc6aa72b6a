package chart_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
)

// TestTracingValues: no OTLP flag by default (nothing is exported); an
// endpoint reaches the queue with its sample ratio; a ratio that samples
// nothing or more than everything is refused at render, naming the key.
func TestTracingValues(t *testing.T) {
	needHelm(t)
	queueArgs := func(args ...string) []string {
		var d appsv1.Deployment
		find(t, parse(t, mustRender(t, args...)), "Deployment", "runplane-queue").into(t, &d)
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name == "queue" {
				return c.Args
			}
		}
		require.FailNow(t, "no queue container")
		return nil
	}
	for _, a := range queueArgs() {
		assert.NotContains(t, a, "--otlp-endpoint", "tracing is off by default")
	}
	args := queueArgs("--set-json", `tracing={"otlpEndpoint":"otel.monitoring:4317","sampleRatio":0.25}`)
	assert.Contains(t, args, "--otlp-endpoint=otel.monitoring:4317")
	assert.Contains(t, args, "--trace-sample-ratio=0.25")
	for _, ratio := range []string{"0", "1.5"} {
		_, err := render(t, "--set-json", `tracing={"otlpEndpoint":"otel:4317","sampleRatio":`+ratio+`}`)
		require.ErrorContains(t, err, "/tracing/sampleRatio", "ratio %s", ratio)
	}
}
