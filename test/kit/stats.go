package kit

import (
	"math"
	"slices"
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
