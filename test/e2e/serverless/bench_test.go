package serverless

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/test/kit"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// BenchmarkWarmSync is the full warm path: HTTP ingress → JetStream →
// activator → dispatch → sidecar → framework-echo over the socket → result
// → sync reply → HTTP answer, one caller at a time, against one ready
// worker. A bare NATS request/reply on the same server is measured in the
// same run for scale; both on the chart's verified TLS.
func BenchmarkWarmSync(b *testing.B) {
	name := fmt.Sprintf("warm%d", time.Now().UnixNano()%100000)
	pool(b, name, 1, 4, map[string]string{api.AnnotationMinAvailable: "1"})
	// Warm up until a worker answers.
	require.Eventually(b, func() bool {
		var rec messages.Record
		code := invoke(b, name, map[string]any{"mode": "sync", "timeoutSeconds": 60}, &rec)
		return code == http.StatusOK && rec.State == messages.StateSucceeded
	}, 90*time.Second, 200*time.Millisecond, "pool never answered")

	// Bare NATS request/reply on the same server.
	sub, err := st.NATSConn(b).Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	require.NoError(b, err)
	defer func() { assert.NoError(b, sub.Unsubscribe()) }()
	nc2 := st.NATSConn(b)
	var bare, full []time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		var rec messages.Record
		code := invoke(b, name, map[string]any{"mode": "sync", "timeoutSeconds": 30, "payload": map[string]string{"prompt": "draw a robot"}}, &rec)
		require.False(b, code != http.StatusOK || rec.State != messages.StateSucceeded, "invoke: HTTP %d %s %s", code, rec.State, rec.Error)
		full = append(full, time.Since(t0))
		t1 := time.Now()
		if _, err := nc2.Request("bench.echo", []byte(`{"prompt":"draw a robot"}`), 5*time.Second); err != nil {
			b.Fatal(err)
		}
		bare = append(bare, time.Since(t1))
	}
	b.StopTimer()
	kit.ReportPercentiles(b, "full", full)
	kit.ReportPercentiles(b, "nats-reqrep", bare)
}

// BenchmarkColdStart is the cold path: an empty pool's first sync
// invocation, split into scale decision (POST → Deployment scaled to 1),
// Pod running (→ Pod Running on its kwok node), worker ready (→ the
// sidecar's ready event) and dispatch (→ the HTTP answer).
func BenchmarkColdStart(b *testing.B) {
	var scale, running, ready, dispatch, total []time.Duration
	nc := st.NATSConn(b)
	for i := range b.N {
		name := fmt.Sprintf("cold%d-%d", time.Now().UnixNano()%100000, i)
		pool(b, name, 0, 1, nil)
		readyAt := make(chan time.Time, 1)
		sub, err := nc.Subscribe(messages.Subjects{Prefix: api.DefaultSubjectPrefix}.Metrics(ns, name)+".*", func(m *nats.Msg) {
			var ev messages.Event
			if json.Unmarshal(m.Data, &ev) == nil && ev.Ready {
				select {
				case readyAt <- time.Now():
				default:
				}
			}
		})
		require.NoError(b, err)
		var scaledAt, runningAt time.Time
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if scaledAt.IsZero() {
					if sc, err := st.Cluster.Client().AppsV1().Deployments(ns).GetScale(context.Background(), name, metav1.GetOptions{}); err == nil && sc.Spec.Replicas >= 1 {
						scaledAt = time.Now()
					}
				}
				if runningAt.IsZero() {
					l, err := st.Cluster.Client().CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: api.LabelPool + "=" + name})
					if err == nil && len(l.Items) > 0 && l.Items[0].Status.Phase == corev1.PodRunning {
						runningAt = time.Now()
					}
				}
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		}()
		t0 := time.Now()
		var rec messages.Record
		code := invoke(b, name, map[string]any{"mode": "sync", "timeoutSeconds": 90}, &rec)
		done := time.Now()
		close(stop)
		wg.Wait()
		_ = sub.Unsubscribe()
		require.False(b, code != http.StatusOK || rec.State != messages.StateSucceeded, "cold invoke: HTTP %d %s %s", code, rec.State, rec.Error)
		var readyTime time.Time
		select {
		case readyTime = <-readyAt:
		default:
			b.Fatal("no ready event")
		}
		require.False(b, scaledAt.IsZero() || runningAt.IsZero(), "scale or Pod running not observed")
		scale = append(scale, scaledAt.Sub(t0))
		running = append(running, runningAt.Sub(scaledAt))
		ready = append(ready, readyTime.Sub(runningAt))
		dispatch = append(dispatch, done.Sub(readyTime))
		total = append(total, done.Sub(t0))
	}
	for _, m := range []struct {
		n string
		d []time.Duration
	}{{"scale", scale}, {"podrunning", running}, {"workerready", ready}, {"dispatch", dispatch}, {"total", total}} {
		b.ReportMetric(kit.Ms(kit.Percentile(m.d, 50)), m.n+"-p50-ms")
	}
}
