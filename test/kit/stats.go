package kit

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// Percentile is the p-th percentile of d by the nearest-rank method (the
// smallest value at least p% of d are at or below); 0 for no values.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(float64(len(s))*p/100)) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Median is Percentile(d, 50).
func Median(d []time.Duration) time.Duration { return Percentile(d, 50) }

// Ms is d in milliseconds, as benchmarks report latencies (…-ms metrics).
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// ReportPercentiles reports d's p50 and p99 as name-p50-ms and
// name-p99-ms.
func ReportPercentiles(b *testing.B, name string, d []time.Duration) {
	b.ReportMetric(Ms(Percentile(d, 50)), name+"-p50-ms")
	b.ReportMetric(Ms(Percentile(d, 99)), name+"-p99-ms")
}

// ReportSpeedup reports base's and d's percentiles (ReportPercentiles) and
// d's over base's at p50 and p99 as speedup-p50 and speedup-p99.
func ReportSpeedup(b *testing.B, baseName string, base []time.Duration, name string, d []time.Duration) {
	ReportPercentiles(b, baseName, base)
	ReportPercentiles(b, name, d)
	for _, p := range []float64{50, 99} {
		b.ReportMetric(Ms(Percentile(d, p))/Ms(Percentile(base, p)), fmt.Sprintf("speedup-p%.0f", p))
	}
}
