package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/kit"
)

// coldStart is when each step of one cold start was seen. The queue's own
// times (the Record's, the sidecar's Events) have nanosecond resolution;
// the API objects' condition times have one second, so the Kubernetes
// steps are the moments a watch delivered them (the same host's clock).
type coldStart struct {
	accepted  time.Time // Record.AcceptedAt
	scaled    time.Time // the Deployment's replicas went from 0 (watch)
	scheduled time.Time // PodScheduled True (watch)
	sidecar   time.Time // Initialized True: the sidecar started, its startup probe passed (watch)
	started   time.Time // the framework container running (watch)
	ready     time.Time // the sidecar's first ready Event (its At)
	podReady  time.Time // the Pod's Ready condition True (watch)
	// The Record's UpdatedAt in each state.
	dispatched, done time.Time
}

// phases are the figures BenchmarkColdStartRealNode reports, each from the
// step before.
func (c coldStart) phases() map[string]time.Duration {
	return map[string]time.Duration{
		"scale-ms":      c.scaled.Sub(c.accepted),
		"scheduled-ms":  c.scheduled.Sub(c.scaled),
		"started-ms":    c.started.Sub(c.scheduled),
		"sidecar-ms":    c.sidecar.Sub(c.scheduled),
		"ready-ms":      c.ready.Sub(c.started),
		"podready-ms":   c.podReady.Sub(c.started),
		"dispatch-ms":   c.dispatched.Sub(c.ready),
		"result-ms":     c.done.Sub(c.dispatched),
		"total-ms":      c.done.Sub(c.accepted),
		"kubernetes-ms": c.started.Sub(c.scaled),
	}
}

// observer records the steps of one cold start of a pool as its watches
// deliver them.
type observer struct {
	mu sync.Mutex
	c  coldStart
}

func (o *observer) set(at *time.Time, t time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if at.IsZero() {
		*at = t
	}
}

func (o *observer) result() coldStart {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.c
}

// watchPool feeds o from the pool's Deployment, its Pods and its workers'
// Events until ctx ends.
func (o *observer) watchPool(ctx context.Context, b *testing.B, nc *nats.Conn, name string) {
	b.Helper()
	dw, err := env.Client().AppsV1().Deployments(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	require.NoError(b, err)
	pw, err := env.Client().CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: api.LabelPool + "=" + name})
	require.NoError(b, err)
	sub, err := nc.Subscribe(messages.Subjects{Prefix: api.DefaultSubjectPrefix}.Metrics(ns, name)+".*", func(m *nats.Msg) {
		var ev messages.Event
		if json.Unmarshal(m.Data, &ev) == nil && ev.Ready {
			o.set(&o.c.ready, ev.At)
		}
	})
	require.NoError(b, err)
	go func() {
		<-ctx.Done()
		dw.Stop()
		pw.Stop()
		_ = sub.Unsubscribe()
	}()
	go func() {
		for ev := range dw.ResultChan() {
			if d, ok := ev.Object.(*appsv1.Deployment); ok && d.Spec.Replicas != nil && *d.Spec.Replicas > 0 {
				o.set(&o.c.scaled, time.Now())
			}
		}
	}()
	go func() {
		for ev := range pw.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			now := time.Now()
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
					o.set(&o.c.scheduled, now)
				}
				if c.Type == corev1.PodInitialized && c.Status == corev1.ConditionTrue {
					o.set(&o.c.sidecar, now)
				}
			}
			if running(p, "framework") {
				o.set(&o.c.started, now)
			}
			if podReady(p) {
				o.set(&o.c.podReady, now)
			}
		}
	}()
}

// watchRecord feeds o from the invocation's Record in the queue's bucket.
func (o *observer) watchRecord(ctx context.Context, b *testing.B, nc *nats.Conn, id string) {
	b.Helper()
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	kv, err := js.KeyValue(ctx, stream.Config{}.WithDefaults().RecordsBucket)
	require.NoError(b, err)
	w, err := kv.Watch(ctx, stream.Key(ns, id))
	require.NoError(b, err)
	go func() {
		for e := range w.Updates() {
			if e == nil {
				continue // the end of what was stored before
			}
			var rec messages.Record
			if json.Unmarshal(e.Value(), &rec) != nil {
				continue
			}
			o.set(&o.c.accepted, rec.AcceptedAt)
			switch rec.State {
			case messages.StateDispatched:
				o.set(&o.c.dispatched, rec.UpdatedAt)
			case messages.StateSucceeded:
				o.set(&o.c.done, rec.UpdatedAt)
			}
		}
	}()
}

// waitEmpty waits until the pool has no replicas and no Pods: the next
// invocation starts it cold.
func waitEmpty(b *testing.B, ctx context.Context, name string) {
	b.Helper()
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		d, err := env.Client().AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
			return false, nil
		}
		pods, err := env.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelPool + "=" + name})
		return err == nil && len(pods.Items) == 0, nil
	})
	require.NoError(b, err, "the pool %s did not scale back to zero", name)
}

func reportMedians(b *testing.B, samples map[string][]time.Duration) {
	for _, name := range slices.Sorted(maps.Keys(samples)) {
		b.ReportMetric(kit.Ms(kit.Median(samples[name])), name)
	}
}

// BenchmarkColdStartRealNode is an empty pool on the real node to its
// first result, again and again (the pool scales back to zero in between:
// idle-timeout 1s), in phases: the queue's scale decision, the Pod
// scheduled, its containers started (sandbox, the sidecar and its startup
// probe: sidecar-ms; then framework-echo), the worker ready (the sidecar's first ready
// Event), dispatch, and the result; podready-ms is the kubelet's Pod Ready
// from the containers' start, kubernetes-ms scheduled + started. The
// baseline is the same pool warm: invocation to result.
func BenchmarkColdStartRealNode(b *testing.B) {
	if skip != "" {
		b.Skip("no real node on this machine: " + skip)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	name := "cold"
	d := poolDeployment(name, corev1.Container{}, nil, map[string]string{api.AnnotationIdleTimeout: "1s"})
	_, err := env.Client().AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
	require.NoError(b, err)
	b.Cleanup(func() {
		_ = env.Client().AppsV1().Deployments(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	waitPoolKnown(b, name)
	nc := st.NATSConn(b)
	payload := map[string]string{"prompt": "real"}

	b.Run("cold", func(b *testing.B) {
		samples := map[string][]time.Duration{}
		for i := range b.N {
			// ns/op is the caller's cold start only: not the scale-down
			// before it, nor the watches' setup.
			b.StopTimer()
			waitEmpty(b, ctx, name)
			id := fmt.Sprintf("cold-%d-%d", time.Now().UnixNano(), i)
			wctx, stop := context.WithCancel(ctx)
			var o observer
			o.watchPool(wctx, b, nc, name)
			o.watchRecord(wctx, b, nc, id)
			b.StartTimer()
			rec, err := invokeSync(name, payload, id)
			b.StopTimer()
			require.NoError(b, err)
			// The Record's last write may land just after the answer.
			require.NoError(b, wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
				c := o.result()
				return !c.done.IsZero() && !c.podReady.IsZero(), nil
			}), "the Record or the Pod's readiness was never seen for %s", rec.InvocationID)
			stop()
			c := o.result()
			for _, t := range []time.Time{c.accepted, c.scaled, c.scheduled, c.sidecar, c.started, c.ready, c.dispatched} {
				require.False(b, t.IsZero(), "a step was not seen: %+v", c)
			}
			for k, v := range c.phases() {
				samples[k] = append(samples[k], v)
			}
			b.StartTimer()
		}
		reportMedians(b, samples)
	})
	b.Run("baseline", func(b *testing.B) {
		_, err := invokeSync(name, payload, "")
		require.NoError(b, err, "warming the pool")
		var total []time.Duration
		for i := range b.N {
			b.StopTimer()
			id := fmt.Sprintf("warm-%d-%d", time.Now().UnixNano(), i)
			var o observer
			wctx, stop := context.WithCancel(ctx)
			o.watchRecord(wctx, b, nc, id)
			b.StartTimer()
			_, err := invokeSync(name, payload, id)
			require.NoError(b, err)
			require.NoError(b, wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
				return !o.result().done.IsZero(), nil
			}))
			stop()
			c := o.result()
			total = append(total, c.done.Sub(c.accepted))
		}
		reportMedians(b, map[string][]time.Duration{"total-ms": total})
	})
}
