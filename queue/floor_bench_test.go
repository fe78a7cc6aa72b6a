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
// it). A queue that keeps the contract — a call is stored before it is
// accepted, its result is stored before it is answered, HTTP in front and
// the framework behind HTTP — with net/http and JetStream pays about:
//   - jetstream: the call published to a stream and acknowledged, pulled
//     by a worker and acknowledged, its result published to a stream and
//     acknowledged and, once stored, delivered to the caller by a consumer
//     (no Record, no activator, no tenancy, no JSON);
//   - http: one HTTP/1.1 POST and its answer over loopback TCP, net/http
//     on both sides (the ingress's hop; the sidecar's to its framework, over
//     a unix socket, is a second: a review measured the socket within noise
//     of TCP);
//   - record: one key created in a JetStream key-value bucket (file
//     storage): a Record write apart from the stored result.
//
// Each floor is made in its own sub-benchmark and removed after it, on the
// queue's own NATS server (file storage, the same TLS or none) and in the
// same process, so its CPU per call counts what the queue's counts (the
// caller's HTTP client too, and the process's idle CPU) and the queue
// runs on a server without the floors' messages. They are a guide, not a
// proof: each is measured apart, and batched publishes or a cheaper HTTP
// server would lower them.

// jetStreamFloor is the least JetStream work of one durable sync call.
type jetStreamFloor struct {
	js      jetstream.JetStream
	seq     atomic.Uint64
	mu      sync.Mutex
	waiting map[string]chan error // by result subject
}

func newJetStreamFloor(b *testing.B, js jetstream.JetStream) func() error {
	ctx := context.Background()
	f := &jetStreamFloor{js: js, waiting: map[string]chan error{}}
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
	heard, err := results.Consume(func(m jetstream.Msg) { f.answer(m.Subject(), nil) }, jetstream.PullMaxMessages(128))
	require.NoError(b, err)
	// The worker: each call in its own goroutine, as a worker of 128
	// slots; a failure is its call's answer.
	var running sync.WaitGroup
	worked, err := cons.Consume(func(m jetstream.Msg) {
		running.Go(func() {
			result := "floor.result." + m.Subject()[len("floor.call."):]
			if err := m.Ack(); err != nil {
				f.answer(result, fmt.Errorf("ack the call: %w", err))
				return
			}
			if _, err := js.Publish(ctx, result, m.Data()); err != nil {
				f.answer(result, fmt.Errorf("publish the result: %w", err))
			}
		})
	}, jetstream.PullMaxMessages(128))
	require.NoError(b, err)
	b.Cleanup(func() {
		// Stop returns before a callback under way ends: wait for them,
		// then for the publishes they started (a result is heard once
		// stored, maybe before its publish has its acknowledgement).
		worked.Stop()
		heard.Stop()
		<-worked.Closed()
		<-heard.Closed()
		running.Wait()
		assert.NoError(b, js.DeleteStream(context.Background(), "FLOOR"))
	})
	return f.call
}

// answer ends the call waiting on result subject with err (nil: heard).
func (f *jetStreamFloor) answer(subject string, err error) {
	f.mu.Lock()
	ch := f.waiting[subject]
	delete(f.waiting, subject)
	f.mu.Unlock()
	if ch != nil {
		ch <- err
	}
}

// call is one durable request/reply: published (acknowledged: stored),
// run by the worker, its stored result heard.
func (f *jetStreamFloor) call() error {
	id := strconv.FormatUint(f.seq.Add(1), 10)
	result := "floor.result." + id
	done := make(chan error, 1)
	f.mu.Lock()
	f.waiting[result] = done
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.waiting, result)
		f.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := f.js.Publish(ctx, "floor.call."+id, syncBody); err != nil {
		return fmt.Errorf("publish call %s: %w", id, err)
	}
	select {
	case err := <-done:
		return err
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
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	b.Cleanup(func() {
		client.CloseIdleConnections()
		assert.NoError(b, srv.Close())
	})
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
