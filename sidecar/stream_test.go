package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
)

// serveStreamFramework serves a streaming framework on sock until the test ends.
func serveStreamFramework(t testing.TB, sock string, fn framework.StreamFunc) {
	t.Helper()
	ln, err := framework.ListenUnix(sock)
	require.NoError(t, err)
	srv := &http.Server{Handler: framework.NewStreamHandler(fn)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// chunkStream creates the chunks stream as the queue does (fewer limits).
func (e *env) chunkStream() jetstream.Stream {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: messages.ChunksStreamName(api.DefaultStreamName, testNS), Subjects: subjects.ChunkStreamSubjects(testNS)})
	require.NoError(e.t, err)
	return st
}

type storedChunk struct {
	data                    string
	worker                  string
	attempt, execution, seq string
	streamSeq               uint64
}

// chunks reads every chunk stored for invocation id, by any worker.
func (e *env) chunks(st jetstream.Stream, id string) []storedChunk {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subjects.InvocationChunks(testNS, testPool, id)}})
	require.NoError(e.t, err)
	var out []storedChunk
	for {
		msgs, err := c.FetchNoWait(100)
		require.NoError(e.t, err)
		n := 0
		for m := range msgs.Messages() {
			n++
			md, err := m.Metadata()
			require.NoError(e.t, err)
			out = append(out, storedChunk{data: string(m.Data()), worker: subjects.ChunkWorker(m.Subject()), attempt: m.Headers().Get(messages.ChunkAttemptHeader),
				execution: m.Headers().Get(messages.ChunkExecutionHeader), seq: m.Headers().Get(messages.ChunkSeqHeader), streamSeq: md.Sequence.Stream})
		}
		if n == 0 {
			return out
		}
	}
}

// TestStreamRelaysChunksBeforeResult: a streaming framework's chunks are
// stored on the invocation's chunk subject, in order, numbered from 1 with
// their attempt, all of them before the Result, whose response is the
// stream's summary.
func TestStreamRelaysChunksBeforeResult(t *testing.T) {
	e := newEnv(t)
	st := e.chunkStream()
	sock := socketPath(t)
	want := []string{"Once", " upon", " a", " time\nthere"}
	serveStreamFramework(t, sock, func(ctx context.Context, req framework.Request, w framework.ChunkWriter) error {
		for _, tok := range want {
			if err := w.WriteChunk([]byte(tok)); err != nil {
				return err
			}
		}
		return nil
	})
	results := e.results()
	e.startSidecar(e.config("w1", sock))
	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "s1"}, Attempt: 2})
	res := waitResult(t, results)
	require.Equal(t, messages.StateSucceeded, res.State, res.Error)
	// The result is published only after every chunk is stored: reading
	// right after it finds them all.
	got := e.chunks(st, "s1")
	require.Len(t, got, len(want))
	for i, c := range got {
		assert.Equal(t, want[i], c.data)
		assert.Equal(t, "w1", c.worker, "under the worker's own name")
		assert.Equal(t, "2", c.attempt)
		assert.Equal(t, strconv.Itoa(i+1), c.seq)
		assert.NotEmpty(t, c.execution)
		assert.Equal(t, got[0].execution, c.execution, "one execution per framework call")
	}
	assert.Equal(t, "true", res.Response.Headers[framework.StreamedHeader])
	var sum framework.StreamSummary
	require.NoError(t, json.Unmarshal(res.Response.Body, &sum))
	assert.Equal(t, want, sum.Data)

	// Another framework call (here of another invocation) is another
	// execution: a rerun's chunks are never mistaken for the first run's.
	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "s2"}, Attempt: 2})
	require.Equal(t, messages.StateSucceeded, waitResult(t, results).State)
	again := e.chunks(st, "s2")
	require.NotEmpty(t, again)
	assert.NotEqual(t, got[0].execution, again[0].execution)
}

// TestStreamCancelStopsFramework: a cancel mid-stream ends the framework's
// stream (its context ends), the invocation is cancelled, and the chunks
// written before stay stored.
func TestStreamCancelStopsFramework(t *testing.T) {
	e := newEnv(t)
	st := e.chunkStream()
	sock := socketPath(t)
	stopped := make(chan struct{})
	serveStreamFramework(t, sock, func(ctx context.Context, req framework.Request, w framework.ChunkWriter) error {
		defer close(stopped)
		for i := 0; ; i++ {
			if err := w.WriteChunk([]byte(fmt.Sprint(i))); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	results := e.results()
	e.startSidecar(e.config("w1", sock))
	sub, err := e.nc.SubscribeSync(subjects.ChunkSubject(testNS, testPool, "w1", "c1"))
	require.NoError(t, err)
	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "c1"}})
	for range 3 { // the stream is flowing
		_, err := sub.NextMsg(10 * time.Second)
		require.NoError(t, err)
	}
	data, _ := json.Marshal(messages.Cancel{InvocationID: "c1"})
	require.NoError(t, e.nc.Publish(subjects.Cancel(testNS, testPool, "w1"), data))
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the framework's stream did not stop after the cancel")
	}
	res := waitResult(t, results)
	assert.Equal(t, messages.StateCancelled, res.State)
	assert.GreaterOrEqual(t, len(e.chunks(st, "c1")), 3)
}
