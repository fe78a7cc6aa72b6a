package queue_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/framework"
)

// BenchmarkStream measures a streamed invocation through the full path —
// ingress, JetStream, activator, the real sidecar, a streaming framework,
// the chunks stream, the ingress's server-sent events — next to the
// framework's own chunk interval, in one run:
//
//   - first-chunk-ms: POST to the first chunk event at the client (queueing,
//     dispatch and the framework's first write included);
//   - chunk-p50-µs / chunk-p99-µs: per chunk, from the framework's write to
//     the client's read of it (same process, same clock): the overhead the
//     path adds to every chunk;
//   - gap-µs vs framework-gap-µs: the mean time between two chunks at the
//     client and at the framework (equal when the path keeps up).
func BenchmarkStream(b *testing.B) {
	for _, interval := range []time.Duration{0, 5 * time.Millisecond} {
		b.Run(fmt.Sprintf("interval=%s", interval), func(b *testing.B) {
			benchStream(b, interval, 20)
		})
	}
}

func benchStream(b *testing.B, interval time.Duration, chunks int) {
	e := newEnv(b, nil)
	var mu sync.Mutex
	wrote := map[string][]time.Time{} // invocation → write times
	e.streamWorker("w1", func(ctx context.Context, req framework.Request, w framework.ChunkWriter) error {
		var ts []time.Time
		for i := range chunks {
			if i > 0 && interval > 0 {
				time.Sleep(interval)
			}
			ts = append(ts, time.Now())
			if err := w.WriteChunk(fmt.Appendf(nil, "%d", i)); err != nil {
				return err
			}
		}
		mu.Lock()
		wrote[req.InvocationID] = ts
		mu.Unlock()
		return nil
	})
	var first, lat []time.Duration
	var gap, fwGap time.Duration
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("bench-%d", i)
		start := time.Now()
		s := openSSE(b, streamPost(b, e.base, map[string]any{"invocationID": id}))
		var got []time.Time
		for {
			ev, ok := s.next()
			require.True(b, ok, "stream ended early")
			if ev.name == "chunk" {
				got = append(got, time.Now())
				if len(got) == 1 {
					first = append(first, time.Since(start))
				}
			}
			if ev.name == "result" {
				break
			}
		}
		require.Len(b, got, chunks)
		mu.Lock()
		ts := wrote[id]
		mu.Unlock()
		require.Len(b, ts, chunks)
		for j := range chunks {
			lat = append(lat, got[j].Sub(ts[j]))
		}
		gap += got[chunks-1].Sub(got[0]) / time.Duration(chunks-1)
		fwGap += ts[chunks-1].Sub(ts[0]) / time.Duration(chunks-1)
		_ = s.resp.Body.Close()
	}
	b.StopTimer()
	slices.Sort(first)
	slices.Sort(lat)
	b.ReportMetric(float64(first[len(first)/2].Microseconds())/1000, "first-chunk-ms")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "chunk-p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "chunk-p99-µs")
	b.ReportMetric(float64(gap.Microseconds())/float64(b.N), "gap-µs")
	b.ReportMetric(float64(fwGap.Microseconds())/float64(b.N), "framework-gap-µs")
}
