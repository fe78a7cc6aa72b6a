package queue_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/runplane/runplane/api/serverless/v1"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/queuetest"
	"github.com/runplane/runplane/sidecar/sidecartest"
)

// streamWorker runs fn as a streaming framework behind the real sidecar,
// as a worker of testPool the activator knows ready.
func (e *env) streamWorker(name string, fn framework.StreamFunc) {
	e.t.Helper()
	sidecartest.Run(e.t, e.workerConfig(sidecartest.Config{Pool: testPool, Name: name, Concurrency: 2, StreamHandler: fn}))
	e.waitWorkerReady(name)
}

// ingressReplica starts a second queue replica on the same NATS that
// serves only the ingress, and returns its base URL.
func (e *env) ingressReplica() string {
	e.t.Helper()
	cfg := e.cfg
	cfg.DisableActivator = true
	return queuetest.Run(e.t, cfg).Base
}

// sseEvent is one server-sent event.
type sseEvent struct{ id, name, data string }

// sseStream reads server-sent events from one response.
type sseStream struct {
	resp *http.Response
	sc   *bufio.Scanner
}

func openSSE(t testing.TB, req *http.Request) *sseStream {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.FailNow(t, "stream refused", "%d: %s", resp.StatusCode, b)
	}
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	t.Cleanup(func() { resp.Body.Close() })
	return &sseStream{resp: resp, sc: bufio.NewScanner(resp.Body)}
}

// next returns the next event (comments skipped); ok false at the end.
func (s *sseStream) next() (ev sseEvent, ok bool) {
	var data []string
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if ev.name != "" || data != nil {
				ev.data = strings.Join(data, "\n")
				return ev, true
			}
		case strings.HasPrefix(line, ":"):
		default:
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimPrefix(v, " ")
			switch k {
			case "id":
				ev.id = v
			case "event":
				ev.name = v
			case "data":
				data = append(data, v)
			}
		}
	}
	return ev, false
}

// chunks reads up to the nth chunk event: their data and the last one's id.
func (s *sseStream) chunks(t testing.TB, n int) (data []string, lastID string) {
	t.Helper()
	for len(data) < n {
		ev, ok := s.next()
		require.True(t, ok, "the stream ended after %d of %d chunks", len(data), n)
		if ev.name == "chunk" {
			data, lastID = append(data, ev.data), ev.id
		}
	}
	return data, lastID
}

// rest reads to the result event: the chunks' data and ids, and the Record.
func (s *sseStream) rest(t testing.TB) (chunks, ids []string, rec messages.Record) {
	t.Helper()
	for {
		ev, ok := s.next()
		require.True(t, ok, "the stream ended before its result event")
		switch ev.name {
		case "chunk":
			chunks, ids = append(chunks, ev.data), append(ids, ev.id)
		case "result":
			require.NoError(t, json.Unmarshal([]byte(ev.data), &rec))
			_, more := s.next()
			require.False(t, more, "events after the result")
			return chunks, ids, rec
		}
	}
}

func streamPost(t testing.TB, base string, body map[string]any) *http.Request {
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequest("POST", base+"/v1/namespaces/default/pools/"+testPool+"/invocations", strings.NewReader(string(b)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	return req
}

// tokens is a streaming framework that writes n numbered tokens; after
// hold of them it waits for release (or its context) before the rest.
type tokens struct {
	n, hold int
	release chan struct{}
	stopped chan error
	once    sync.Once
}

// holdingTokens is tokens that holds after hold of n.
func holdingTokens(n, hold int) *tokens {
	return &tokens{n: n, hold: hold, release: make(chan struct{}), stopped: make(chan error, 1)}
}

func (tk *tokens) stream(ctx context.Context, req framework.Request, w framework.ChunkWriter) error {
	for i := range tk.n {
		if i == tk.hold && tk.release != nil {
			select {
			case <-tk.release:
			case <-ctx.Done():
				tk.once.Do(func() { tk.stopped <- ctx.Err() })
				return ctx.Err()
			}
		}
		if err := w.WriteChunk(fmt.Appendf(nil, "tok%d", i)); err != nil {
			return err
		}
	}
	return nil
}

func want(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("tok%d", i))
	}
	return out
}

// TestStreamInOrderAndComplete: POST with Accept: text/event-stream gets
// the invocation event, then every chunk of a real sidecar's streaming
// framework in order, each with an increasing id, then the result.
func TestStreamInOrderAndComplete(t *testing.T) {
	e := newEnv(t, nil)
	tk := &tokens{n: 20}
	e.streamWorker("w1", tk.stream)
	s := openSSE(t, streamPost(t, e.base, map[string]any{"invocationID": "st-1", "payload": map[string]string{"prompt": "hi"}}))
	ev, ok := s.next()
	require.True(t, ok)
	assert.Equal(t, "invocation", ev.name)
	assert.Equal(t, "st-1", s.resp.Header.Get("Runplane-Invocation-Id"))
	chunks, ids, rec := s.rest(t)
	assert.Equal(t, want(0, 20), chunks)
	for i := 1; i < len(ids); i++ {
		assert.Less(t, seq(t, ids[i-1]), seq(t, ids[i]), "ids increase")
	}
	assert.Equal(t, messages.StateSucceeded, rec.State, rec.Error)
	require.NotNil(t, rec.Response)
	var sum framework.StreamSummary
	require.NoError(t, json.Unmarshal(rec.Response.Body, &sum))
	assert.Equal(t, 20, sum.Chunks)

	// The finished invocation streams again, whole, while retained.
	get, err := http.NewRequest("GET", e.base+"/v1/namespaces/default/invocations/st-1/stream", nil)
	require.NoError(t, err)
	again, _, rec2 := openSSE(t, get).rest(t)
	assert.Equal(t, want(0, 20), again)
	assert.Equal(t, messages.StateSucceeded, rec2.State)
}

func seq(t testing.TB, id string) uint64 {
	var n uint64
	_, err := fmt.Sscan(id, &n)
	require.NoError(t, err, "id %q", id)
	return n
}

// TestStreamResumeOnOtherReplica: a client that dropped its connection
// after 3 chunks resumes with Last-Event-ID on another ingress replica and
// gets exactly the chunks after the third, then the result.
func TestStreamResumeOnOtherReplica(t *testing.T) {
	e := newEnv(t, nil)
	other := e.ingressReplica()
	tk := holdingTokens(10, 3)
	e.streamWorker("w1", tk.stream)
	s := openSSE(t, streamPost(t, e.base, map[string]any{"stream": true, "invocationID": "st-2"}))
	first, last := s.chunks(t, 3)
	assert.Equal(t, want(0, 3), first)
	require.NoError(t, s.resp.Body.Close()) // the connection drops
	close(tk.release)                       // the framework goes on

	get, err := http.NewRequest("GET", other+"/v1/namespaces/default/invocations/st-2/stream", nil)
	require.NoError(t, err)
	get.Header.Set("Last-Event-ID", last)
	chunks, _, rec := openSSE(t, get).rest(t)
	assert.Equal(t, want(3, 10), chunks, "exactly the rest")
	assert.Equal(t, messages.StateSucceeded, rec.State, rec.Error)
}

// TestStreamCancelMidStream: a cancel while the framework streams stops
// the framework's stream, and the client's stream ends with the cancelled
// Record.
func TestStreamCancelMidStream(t *testing.T) {
	e := newEnv(t, nil)
	tk := holdingTokens(10, 2)
	e.streamWorker("w1", tk.stream)
	s := openSSE(t, streamPost(t, e.base, map[string]any{"stream": true, "invocationID": "st-3"}))
	s.chunks(t, 2)
	r := e.do("POST", "/v1/namespaces/default/invocations/st-3/cancel", nil)
	require.Equal(t, http.StatusOK, r.code, "%s", r.raw)
	select {
	case err := <-tk.stopped:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(15 * time.Second):
		t.Fatal("the framework's stream was not stopped")
	}
	chunks, _, rec := s.rest(t)
	assert.Empty(t, chunks, "nothing streamed after the cancel")
	assert.Equal(t, messages.StateCancelled, rec.State)
}

// TestStreamBadLastEventID: a Last-Event-ID that is not a sequence is a 400.
func TestStreamBadLastEventID(t *testing.T) {
	e := newEnv(t, nil)
	req, err := http.NewRequest("GET", e.base+"/v1/namespaces/default/invocations/x/stream", nil)
	require.NoError(t, err)
	req.Header.Set("Last-Event-ID", "abc")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, string(b), "Last-Event-ID")
}

// TestStreamsPerNamespaceBounded: a tenant opening result streams without
// end is refused past its namespace's limit (429 naming it), each stream
// holding a consumer and buffered chunks in the shared ingress; a closed
// stream frees its slot.
func TestStreamsPerNamespaceBounded(t *testing.T) {
	e := newEnv(t, func(c *queue.Config) { c.Limits.NamespaceMaxStreams = 2 })
	tk := holdingTokens(5, 1)
	e.streamWorker("w1", tk.stream)
	first := openSSE(t, streamPost(t, e.base, map[string]any{"stream": true, "invocationID": "st-lim"}))
	get := func() *http.Response {
		req, err := http.NewRequest("GET", e.base+"/v1/namespaces/default/invocations/st-lim/stream", nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp
	}
	second := get()
	require.Equal(t, http.StatusOK, second.StatusCode)
	third := get()
	body, err := io.ReadAll(third.Body)
	require.NoError(t, err)
	require.NoError(t, third.Body.Close())
	require.Equal(t, http.StatusTooManyRequests, third.StatusCode, string(body))
	assert.Contains(t, string(body), `"limit":"namespace_streams"`)
	assert.NotEmpty(t, third.Header.Get("Retry-After"))
	// A new streamed invocation is refused before it is accepted: nothing
	// runs for a caller who got a 429.
	refused, err := http.DefaultClient.Do(streamPost(t, e.base, map[string]any{"stream": true, "invocationID": "st-lim-2"}))
	require.NoError(t, err)
	require.NoError(t, refused.Body.Close())
	require.Equal(t, http.StatusTooManyRequests, refused.StatusCode)
	gone, err := http.Get(e.base + "/v1/namespaces/default/invocations/st-lim-2")
	require.NoError(t, err)
	require.NoError(t, gone.Body.Close())
	assert.Equal(t, http.StatusNotFound, gone.StatusCode, "the refused stream's invocation was accepted")

	require.NoError(t, second.Body.Close())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp := get()
		defer resp.Body.Close()
		assert.Equal(c, http.StatusOK, resp.StatusCode, "the closed stream's slot")
	}, 30*time.Second, 100*time.Millisecond)
	close(tk.release)
	_, _, rec := first.rest(t)
	assert.Equal(t, messages.StateSucceeded, rec.State, rec.Error)
}

// eventSource follows url as the SSE spec's EventSource does: it sends the
// last id it saw as Last-Event-ID on every reconnect, reconnects whenever
// a stream ends, and stops on 204 No Content. drop(conn, n, ev) cuts the
// connection after the n-th event of connection conn (a network drop). It
// returns every event seen, across connections, and the number of
// connections; more than maxConns fails (the client would never stop).
func eventSource(t testing.TB, url string, drop func(conn, n int, ev sseEvent) bool) (events []sseEvent, conns int) {
	t.Helper()
	const maxConns = 6
	lastID := ""
	for conns = 1; ; conns++ {
		require.LessOrEqual(t, conns, maxConns, "the client never stopped reconnecting: %+v", events)
		req, err := http.NewRequest("GET", url, nil)
		require.NoError(t, err)
		req.Header.Set("Accept", "text/event-stream")
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		if resp.StatusCode == http.StatusNoContent {
			resp.Body.Close()
			return events, conns
		}
		require.Equal(t, http.StatusOK, resp.StatusCode)
		s := &sseStream{resp: resp, sc: bufio.NewScanner(resp.Body)}
		for n := 1; ; n++ {
			ev, ok := s.next()
			if !ok {
				break
			}
			require.NotEmpty(t, ev.id, "event %s without id:", ev.name)
			lastID = ev.id
			events = append(events, ev)
			if drop != nil && drop(conns, n, ev) {
				break
			}
		}
		resp.Body.Close()
	}
}

// TestStreamEventSourceStopsAfterResult: a browser's EventSource that
// loses its connection before the result resumes where it was (after the
// invocation event, after a chunk), gets every chunk once and the result
// once, and its reconnect after the result is answered 204, which ends
// it; before, it received the result again on every reconnect, for ever.
func TestStreamEventSourceStopsAfterResult(t *testing.T) {
	e := newEnv(t, nil)
	tk := holdingTokens(6, 3)
	e.streamWorker("w1", tk.stream)
	r := e.do("POST", "/v1/namespaces/default/pools/"+testPool+"/invocations", map[string]any{"invocationID": "es-1", "mode": "async"})
	require.Equal(t, http.StatusAccepted, r.code, "%s", r.raw)

	events, conns := eventSource(t, e.base+"/v1/namespaces/default/invocations/es-1/stream", func(conn, n int, ev sseEvent) bool {
		switch conn {
		case 1: // dropped right after the invocation event
			return ev.name == "invocation"
		case 2: // dropped after the second chunk; the framework then goes on
			if ev.name == "chunk" && ev.data == "tok1" {
				close(tk.release)
				return true
			}
		}
		return false
	})
	var chunks []string
	results, had := 0, "0"
	for _, ev := range events {
		switch ev.name {
		case "chunk":
			chunks = append(chunks, ev.data)
			had = ev.id
		case "result":
			results++
			assert.Equal(t, v1.ResultEventID, ev.id)
		default: // the last chunk the client has: a resume from it loses nothing
			assert.Equal(t, had, ev.id, "%s event's id", ev.name)
		}
	}
	assert.Equal(t, want(0, 6), chunks, "every chunk once, in order")
	assert.Equal(t, 1, results, "the result once")
	assert.Equal(t, 4, conns, "two drops, the connection that got the result, and the 204")
}
