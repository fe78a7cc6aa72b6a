package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
)

// BenchmarkDispatchToReply is the sidecar hot path: a JetStream dispatch
// with a sync ReplyTo → sidecar → Go echo framework over the unix socket →
// result into the stream + reply, measured from publish to reply. The
// parallel cases keep `concurrency` dispatches in flight, on a NATS
// without and with verified TLS (nats=plain, nats=tls: the sidecar's and
// the publisher's connections), and with the journal (journal=fsync: a
// state directory, as every worker Pod has; the call and the answer are
// each fsynced before they go on).
func BenchmarkDispatchToReply(b *testing.B) {
	for _, tc := range []struct {
		name            string
		useTLS, journal bool
	}{{"nats=plain", false, false}, {"nats=tls", true, false}, {"nats=plain/journal=fsync", false, true}} {
		b.Run(tc.name, func(b *testing.B) { dispatchToReply(b, tc.useTLS, tc.journal) })
	}
}

func dispatchToReply(b *testing.B, useTLS, journal bool) {
	for _, conc := range []int{1, 4} {
		b.Run(fmt.Sprintf("concurrency%d", conc), func(b *testing.B) {
			e := newEnvTLS(b, useTLS)
			sock := socketPath(b)
			serveFramework(b, sock, framework.Echo(framework.EchoOptions{}))
			cfg := e.config("bench", sock)
			cfg.Concurrency = conc
			cfg.FetchWait = time.Second
			if journal {
				cfg.StateDir = b.TempDir()
			}
			s, err := New(cfg)
			require.NoError(b, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			defer func() { cancel(); assert.NoError(b, <-done) }()
			require.Eventually(b, func() bool { return s.ready.Load() && s.consumer.Load() != nil }, waitFor, 10*time.Millisecond, "sidecar ready")

			var mu sync.Mutex
			samples := make([]time.Duration, 0, b.N)
			next := make(chan int)
			var wg sync.WaitGroup
			b.ResetTimer()
			for w := range conc {
				wg.Add(1)
				go func() {
					defer wg.Done()
					inbox := nats.NewInbox()
					sub, err := e.nc.SubscribeSync(inbox)
					if err != nil {
						b.Error(err)
						return
					}
					defer func() { assert.NoError(b, sub.Unsubscribe()) }()
					local := []time.Duration{}
					for i := range next {
						id := fmt.Sprintf("b%d-%d", w, i)
						d, _ := json.Marshal(messages.Dispatch{Invocation: messages.Invocation{InvocationID: id, Pool: testPool, Mode: messages.ModeSync,
							ReplyTo: inbox, Payload: json.RawMessage(`{"prompt":"draw a robot"}`)}, Worker: "bench", Attempt: 1, DispatchedAt: time.Now()})
						t0 := time.Now()
						if _, err := e.js.Publish(context.Background(), subjects.Dispatch(testNS, testPool, "bench"), d, jetstream.WithMsgID(messages.DispatchMsgID(testNS, id, 1))); err != nil {
							b.Error(err)
							return
						}
						m, err := sub.NextMsg(10 * time.Second)
						if err != nil {
							b.Errorf("reply for %s: %v", id, err)
							return
						}
						local = append(local, time.Since(t0))
						var r messages.Result
						if err := json.Unmarshal(m.Data, &r); err != nil || r.State != messages.StateSucceeded {
							b.Errorf("reply %s: %s", id, m.Data)
						}
					}
					mu.Lock()
					samples = append(samples, local...)
					mu.Unlock()
				}()
			}
			for i := range b.N {
				next <- i
			}
			close(next)
			wg.Wait()
			b.StopTimer()
			slices.Sort(samples)
			if len(samples) > 0 {
				b.ReportMetric(float64(samples[len(samples)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(samples[len(samples)*99/100].Microseconds()), "p99-µs")
			}
		})
	}
}

// BenchmarkIdleWorker is what an idle worker of concurrency 64 costs NATS,
// with the default fetch wait and heartbeat interval: the messages the
// server takes in and sends out per second (its pull requests and their
// expiries, its heartbeats). One op is one second idle: run it with
// -benchtime 10x.
func BenchmarkIdleWorker(b *testing.B) {
	e := newEnv(b)
	sock := socketPath(b)
	serveFramework(b, sock, framework.Echo(framework.EchoOptions{}))
	cfg := e.config("idle", sock)
	cfg.Concurrency, cfg.FetchWait, cfg.HeartbeatInterval = 64, DefaultFetchWait, DefaultHeartbeatInterval
	s, err := New(cfg)
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); assert.NoError(b, <-done) }()
	require.Eventually(b, func() bool { return s.ready.Load() && s.consumer.Load() != nil }, waitFor, 10*time.Millisecond, "sidecar ready")
	time.Sleep(cfg.FetchWait) // past the start's first pulls
	msgs := func() int64 {
		v, err := e.srv.Varz(nil)
		require.NoError(b, err)
		return v.InMsgs + v.OutMsgs
	}
	b.ResetTimer()
	before, t0 := msgs(), time.Now()
	for range b.N {
		time.Sleep(time.Second)
	}
	b.ReportMetric(float64(msgs()-before)/time.Since(t0).Seconds(), "nats-msgs/s")
}
