package queue_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/objects"
	"github.com/runplane/runplane/queue"
)

// BenchmarkPayloadRoundTrip measures a sync invocation whose payload and
// echoed result are 1 MiB and 10 MiB (above NATS's max_payload: both travel
// through the pool's Object Store bucket), through the real sidecar and the
// echo framework, next to a "baseline" in the same run: the bare Object
// Store write and read of the same bytes (objects.Put + objects.Get). It
// reports p50, p99, the process's CPU per call and MB/s of payload.
func BenchmarkPayloadRoundTrip(b *testing.B) {
	// Each 10 MiB call leaves its payload and its echoed answer (~24 MiB)
	// in the namespace's bucket until they expire: room for every sample
	// of -count 3, ~250 MiB (the default 128 MiB refused the second one;
	// the bucket's bound is reserved on the disk, so no more than that).
	e := newEnv(b, func(c *queue.Config) { c.Stream.ObjectsMaxBytes = 384 << 20 })
	e.echoWorker("w1")
	client := &http.Client{Timeout: 2 * time.Minute}
	for _, size := range []int{1 << 20, 10 << 20} {
		payload := bigJSON(b, size)
		body := mustJSON(b, map[string]any{"mode": "sync", "timeoutSeconds": 120, "payload": payload})
		buckets := &objects.Buckets{JS: e.js, Cfg: e.cfg.Stream.WithDefaults().ObjectsConfig()}
		obs, err := buckets.Ensure(context.Background(), "default")
		require.NoError(b, err)
		calls := map[string]func() error{
			"baseline": func() error {
				ref, err := objects.Put(context.Background(), obs, "bench", payload, e.nc.MaxPayload())
				if err != nil {
					return err
				}
				_, err = objects.Get(context.Background(), e.js, ref, 0)
				return err
			},
			"queue": func() error {
				r, err := client.Post(e.base+"/v1/namespaces/default/pools/"+testPool+"/invocations", "application/json", bytes.NewReader(body))
				if err != nil {
					return err
				}
				defer r.Body.Close()
				n, _ := io.Copy(io.Discard, r.Body)
				if r.StatusCode != 200 || n < int64(size) {
					return fmt.Errorf("status %d, %d bytes", r.StatusCode, n)
				}
				return nil
			},
		}
		for _, name := range []string{"baseline", "queue"} {
			b.Run(fmt.Sprintf("size=%dMiB/%s", size>>20, name), func(b *testing.B) {
				lat := make([]time.Duration, 0, b.N)
				b.SetBytes(int64(len(payload)))
				c0 := processCPU()
				for b.Loop() {
					t0 := time.Now()
					require.NoError(b, calls[name]())
					lat = append(lat, time.Since(t0))
				}
				// CPU of the whole process (NATS, queue, sidecar, framework,
				// client) per call: steadier than latency on a shared machine.
				b.ReportMetric(float64((processCPU()-c0).Milliseconds())/float64(len(lat)), "cpu-ms/op")
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			})
		}
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
