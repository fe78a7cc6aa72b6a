package queue_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The floors of a durable sync call, measured beside the queue in
// BenchmarkSyncRoundTrip (issue 33: where a goal is missed, what bounds
// it). Whatever its design, a queue that keeps the contract — a call is
// stored before it is accepted, its result is stored before it is
// answered, over HTTP — pays at least:
//   - jetstream: the call published to a stream and acknowledged, pulled
//     by a worker and acknowledged, its result published to a stream and
//     acknowledged and, once stored, delivered to the caller by a consumer
//     (no Record, no activator, no tenancy, no JSON);
//   - http: one HTTP/1.1 POST and its answer over loopback, net/http on
//     both sides (the ingress's hop; the sidecar's to its framework is a
//     second);
//   - record: one key created in a JetStream key-value bucket (file
//     storage), the one Record write issue 33 asks of the happy path.
//
// Both run on the queue's own NATS server (file storage, the same TLS or
// none) in the same process, so their CPU per call adds up against the
// queue's: the queue's CPU goal cannot be below their sum.

// jetStreamFloor is the least JetStream work of one durable sync call.
type jetStreamFloor struct {
	js      jetstream.JetStream
	seq     atomic.Uint64
	mu      sync.Mutex
	waiting map[string]chan struct{}
}

func newJetStreamFloor(b *testing.B, js jetstream.JetStream) *jetStreamFloor {
	ctx := context.Background()
	f := &jetStreamFloor{js: js, waiting: map[string]chan struct{}{}}
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FLOOR", Subjects: []string{"floor.>"}, Storage: jetstream.FileStorage})
	require.NoError(b, err)
	cons, err := js.CreateOrUpdateConsumer(ctx, "FLOOR", jetstream.ConsumerConfig{Durable: "worker", FilterSubject: "floor.call.*",
		AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 128})
	require.NoError(b, err)
	// The caller hears its result once the stream has stored it: a
	// consumer without acks (a plain subscription could hear it before).
	results, err := js.CreateOrUpdateConsumer(ctx, "FLOOR", jetstream.ConsumerConfig{Durable: "caller", FilterSubject: "floor.result.*",
		AckPolicy: jetstream.AckNonePolicy})
	require.NoError(b, err)
	heard, err := results.Consume(func(m jetstream.Msg) {
		f.mu.Lock()
		ch := f.waiting[m.Subject()]
		delete(f.waiting, m.Subject())
		f.mu.Unlock()
		if ch != nil {
			close(ch)
		}
	}, jetstream.PullMaxMessages(128))
	require.NoError(b, err)
	// The worker: each call in its own goroutine, as a worker of 128 slots.
	var running sync.WaitGroup
	worked, err := cons.Consume(func(m jetstream.Msg) {
		running.Go(func() {
			if err := m.Ack(); err != nil {
				b.Error(err)
				return
			}
			id := m.Subject()[len("floor.call."):]
			if _, err := js.Publish(ctx, "floor.result."+id, m.Data()); err != nil {
				b.Error(err)
			}
		})
	}, jetstream.PullMaxMessages(128))
	require.NoError(b, err)
	b.Cleanup(func() {
		worked.Stop()
		heard.Stop()
		// A result is heard once stored, maybe before its publish has
		// its acknowledgement: the publishes end before the connection.
		running.Wait()
		assert.NoError(b, js.DeleteStream(context.Background(), "FLOOR"))
	})
	return f
}

// call is one durable request/reply: published (acknowledged: stored),
// run by the worker, its stored result heard.
func (f *jetStreamFloor) call() error {
	id := strconv.FormatUint(f.seq.Add(1), 10)
	done := make(chan struct{})
	f.mu.Lock()
	f.waiting["floor.result."+id] = done
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := f.js.Publish(ctx, "floor.call."+id, syncBody); err != nil {
		return fmt.Errorf("publish call %s: %w", id, err)
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("result of call %s: %w", id, ctx.Err())
	}
}

// recordFloor creates one key per call in a bucket of its own, as the
// ingress creates an invocation's Record.
func recordFloor(b *testing.B, js jetstream.JetStream) func() error {
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "floor", Storage: jetstream.FileStorage})
	require.NoError(b, err)
	b.Cleanup(func() { assert.NoError(b, js.DeleteKeyValue(context.Background(), "floor")) })
	var seq atomic.Uint64
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := kv.Create(ctx, "call-"+strconv.FormatUint(seq.Add(1), 10), syncBody)
		return err
	}
}

// httpFloor is one HTTP POST answered with its body, net/http on both
// sides over loopback.
func httpFloor(b *testing.B) func() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { assert.NoError(b, srv.Close()) })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	url := "http://" + ln.Addr().String() + "/"
	return func() error {
		r, err := client.Post(url, "application/json", bytes.NewReader(syncBody))
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", r.StatusCode)
		}
		return nil
	}
}
