package activator

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/activator/internal/state"
	"github.com/runplane/runplane/queue/stream"
)

// TestWorkerCannotSpeakForSibling: worker "a" of pool ns/p publishes
// Events naming its sibling "b", which runs an invocation: a deregistration
// with nothing in flight (b's work would be requeued and run twice), an
// unready heartbeat, a draining one. Whatever subject "a" uses (its own,
// b's root pool subject of older sidecars), none is applied: b keeps its
// invocation and stays ready. b's own Event on its own subject applies.
func TestWorkerCannotSpeakForSibling(t *testing.T) {
	subj := messages.Subjects{Prefix: "rs"}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 20, 0, 0, 0, time.UTC))
	a := &Activator{cfg: Config{Logger: slog.New(slog.DiscardHandler), Store: &stream.Store{Subjects: subj}, Clock: clk},
		metrics: newMetrics(prometheus.NewRegistry()), kick: make(chan struct{}, 1)}
	a.st = state.New(state.Config{Workers: state.Workers{HeartbeatTimeout: metav1.Duration{Duration: 15 * time.Second}, MaxAttempts: 3}, Backoff: time.Second, MaxBackoff: time.Second,
		ExecutionGrace: time.Second, DrainHold: time.Minute}, clk)
	ctx := context.Background()
	send := func(subject string, ev messages.Event) {
		ev.Namespace, ev.Pool, ev.At = "ns", "p", clk.Now()
		b, err := json.Marshal(ev)
		require.NoError(t, err)
		a.onEvent(ctx, &nats.Msg{Subject: subject, Data: b})
	}
	a.locked(func(s *state.State) {
		for _, w := range []string{"a", "b"} {
			s.Event(messages.Event{Type: messages.EventRegistered, Namespace: "ns", Pool: "p", Worker: w, Concurrency: 1, Ready: w == "b"})
		}
	})
	it := &state.Item{Inv: messages.Invocation{InvocationID: "i", Namespace: "ns", Pool: "p", AcceptedAt: clk.Now(), TTLSeconds: 60, TimeoutSeconds: 30}}
	var as []state.Assignment
	a.locked(func(s *state.State) { require.True(t, s.Enqueue(it)); as = s.Dispatch() })
	require.Len(t, as, 1)
	require.Equal(t, "b", as[0].Worker)

	forged := []struct {
		name, subject string
		ev            messages.Event
	}{
		{"deregister b on a's subject", subj.Metrics("ns", "p") + ".a", messages.Event{Type: messages.EventDeregistered, Worker: "b"}},
		{"deregister b on the pool's subject", subj.Metrics("ns", "p"), messages.Event{Type: messages.EventDeregistered, Worker: "b"}},
		{"b unready on a's subject", subj.Metrics("ns", "p") + ".a", messages.Event{Type: messages.EventHeartbeat, Worker: "b", Concurrency: 1}},
		{"b draining on the pool's subject", subj.Metrics("ns", "p"), messages.Event{Type: messages.EventHeartbeat, Worker: "b", Concurrency: 1, Ready: true, Draining: true}},
		{"b on a subject of no worker", subj.Metrics("ns", "p") + ".b.x", messages.Event{Type: messages.EventDeregistered, Worker: "b"}},
	}
	for _, f := range forged {
		send(f.subject, f.ev)
		a.locked(func(s *state.State) {
			w := s.Pool(state.Key("ns", "p")).Workers["b"]
			require.NotNil(t, w, "%s: b is gone", f.name)
			assert.True(t, w.Ready && !w.Draining, "%s: b not ready", f.name)
			assert.Same(t, it, w.InFlight["i"], "%s: b's invocation taken from it", f.name)
		})
	}
	var m dto.Metric
	require.NoError(t, a.metrics.foreign.WithLabelValues("event").Write(&m))
	assert.Equal(t, 3.0, m.GetCounter().GetValue(), "refused events on worker subjects")
	require.NoError(t, a.metrics.foreign.WithLabelValues("legacy_event_subject").Write(&m))
	assert.Equal(t, 2.0, m.GetCounter().GetValue(), "events on the pool's subject")

	// b itself may say it is draining.
	send(subj.Metrics("ns", "p")+".b", messages.Event{Type: messages.EventHeartbeat, Worker: "b", Concurrency: 1, Ready: true, Draining: true, InFlight: 1})
	a.locked(func(s *state.State) { assert.True(t, s.Pool(state.Key("ns", "p")).Workers["b"].Draining) })
}
