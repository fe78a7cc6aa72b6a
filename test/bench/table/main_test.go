package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTableMediansAndBaselineRatio(t *testing.T) {
	in := `goos: linux
pkg: github.com/runplane/runplane/queue
BenchmarkRoundTrip/baseline-2   1000   100 ns/op
BenchmarkRoundTrip/baseline-2   1000   300 ns/op
BenchmarkRoundTrip/baseline-2   1000   200 ns/op
BenchmarkRoundTrip/queue-2      1000   900 ns/op   2.5 p99-ms
BenchmarkRoundTrip/queue-2      1000   400 ns/op   1.5 p99-ms
BenchmarkRoundTrip/queue-2      1000   500 ns/op   9.5 p99-ms
Benchmark log line without numbers
ok  	github.com/runplane/runplane/queue	1.0s
`
	var out strings.Builder
	require.NoError(t, run(strings.NewReader(in), &out))
	got := out.String()
	for _, want := range []string{"queue  BenchmarkRoundTrip/queue  ns/op  500  3  2.50x", "p99-ms  2.50  3", "BenchmarkRoundTrip/baseline  ns/op  200  3  queue"} {
		assert.Contains(t, strings.Join(strings.Fields(got), "  "), want, "output:\n%s", got)
	}
}

func TestTrimProcs(t *testing.T) {
	tests := map[string]string{"BenchmarkA-2": "BenchmarkA", "BenchmarkA/b-c-16": "BenchmarkA/b-c", "BenchmarkA": "BenchmarkA"}
	for in, want := range tests {
		assert.Equal(t, want, trimProcs(in), "trimProcs(%q)", in)
	}
}
