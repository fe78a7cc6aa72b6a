package framework_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/sidecar/frameworkclient"
)

// reportLatency adds p50 and p99 of the samples to the benchmark output.
func reportLatency(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(samples[len(samples)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkInvokeUnix is the bare framework call: the Go client posts an
// envelope over the unix socket to the Go echo framework.
func BenchmarkInvokeUnix(b *testing.B) {
	for _, par := range []int{1, 4} {
		b.Run(map[int]string{1: "serial", 4: "parallel4"}[par], func(b *testing.B) {
			sock := shortSocket(b)
			serve(b, sock, framework.DefaultHealthPath, framework.NewHandler(framework.Echo(framework.EchoOptions{})))
			c := frameworkclient.NewClient(sock, "", "")
			req := framework.Request{InvocationID: "bench", WorkerName: "w", Mode: "sync", Payload: json.RawMessage(`{"prompt":"draw a robot"}`), DispatchedAt: time.Now()}
			var mu sync.Mutex
			samples := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			var wg sync.WaitGroup
			next := make(chan struct{})
			for range par {
				wg.Add(1)
				go func() {
					defer wg.Done()
					local := make([]time.Duration, 0, b.N/par+1)
					for range next {
						t0 := time.Now()
						if _, err := c.Invoke(context.Background(), req); err != nil {
							b.Error(err)
							return
						}
						local = append(local, time.Since(t0))
					}
					mu.Lock()
					samples = append(samples, local...)
					mu.Unlock()
				}()
			}
			for range b.N {
				next <- struct{}{}
			}
			close(next)
			wg.Wait()
			b.StopTimer()
			reportLatency(b, samples)
		})
	}
}
