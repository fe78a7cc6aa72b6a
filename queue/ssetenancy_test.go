package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/runplane/runplane/api/serverless/v1"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
)

// chunkAs stores a chunk of invocation id as worker would (the test's
// connection has every permission; NATS stops a real worker from using a
// name not its own: TestWorkerChunkPermissions) and returns its sequence.
func (e *env) chunkAs(worker, id string, attempt int, execution string, num int, data string) uint64 {
	e.t.Helper()
	m := nats.NewMsg(e.subj.ChunkSubject("default", testPool, worker, id))
	m.Data = []byte(data)
	m.Header.Set(messages.ChunkAttemptHeader, strconv.Itoa(attempt))
	m.Header.Set(messages.ChunkExecutionHeader, execution)
	m.Header.Set(messages.ChunkSeqHeader, strconv.Itoa(num))
	ack, err := e.js.PublishMsg(context.Background(), m)
	require.NoError(e.t, err)
	return ack.Sequence
}

// events reads the stream to its result: every event's name, and the
// chunks' data.
func (s *sseStream) events(t testing.TB) (names, chunks []string, all []sseEvent) {
	t.Helper()
	for {
		ev, ok := s.next()
		require.True(t, ok, "the stream ended before its result event (events %v)", names)
		names, all = append(names, ev.name), append(all, ev)
		if ev.name == "chunk" {
			chunks = append(chunks, ev.data)
		}
		if ev.name == "result" {
			return names, chunks, all
		}
	}
}

func streamGet(t testing.TB, base, id, lastEventID string) *http.Request {
	req, err := http.NewRequest("GET", base+"/v1/namespaces/default/invocations/"+id+"/stream", nil)
	require.NoError(t, err)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	return req
}

// TestStreamIgnoresSiblingChunks: while a real sidecar streams, chunks
// stored under a sibling worker's name for the same invocation (the
// attempt the Record gives the streaming worker, and a later attempt that
// does not exist) are not sent: the client gets exactly the framework's
// chunks, and no attempt event.
func TestStreamIgnoresSiblingChunks(t *testing.T) {
	e := newEnv(t, nil)
	tk := holdingTokens(10, 3)
	e.streamWorker("w1", tk.stream)
	s := openSSE(t, streamPost(t, e.base, map[string]any{"stream": true, "invocationID": "st-sib"}))
	s.chunks(t, 3)
	e.chunkAs("w2", "st-sib", 1, "forged", 4, "forged-same-attempt")
	e.chunkAs("w2", "st-sib", 2, "forged", 1, "forged-next-attempt")
	close(tk.release)
	names, chunks, all := s.events(t)
	assert.Equal(t, want(3, 10), chunks)
	assert.NotContains(t, names, "attempt")
	var rec messages.Record
	require.NoError(t, json.Unmarshal([]byte(all[len(all)-1].data), &rec))
	assert.Equal(t, messages.StateSucceeded, rec.State, rec.Error)
	metrics, err := e.metrics()
	require.NoError(t, err)
	assert.Contains(t, metrics, `runplane_ingress_stream_chunks_dropped_total{reason="foreign"} 2`)
}

// TestStreamRestartIsAnnounced: the worker holding the attempt runs it
// again from its start (a restarted sidecar handed the same dispatch): its
// rerun numbers chunks from 1 under a new execution. A client that had
// chunks 1..5 of the first run and resumes gets a restart event and every
// chunk of the rerun — not the rerun's 6.. after its 1..5 dropped as
// copies.
func TestStreamRestartIsAnnounced(t *testing.T) {
	e := newEnv(t, nil)
	g := newGate()
	e.worker("w1", 1, g.handler)
	s := openSSE(t, streamPost(t, e.base, map[string]any{"stream": true, "invocationID": "st-rerun"}))
	require.Equal(t, "st-rerun", g.next(t))
	att := e.record("st-rerun").Attempt
	var last uint64
	for i := 1; i <= 5; i++ {
		last = e.chunkAs("w1", "st-rerun", att, "run1", i, fmt.Sprint("a", i))
	}
	s.chunks(t, 5)
	require.NoError(t, s.resp.Body.Close())
	for i := 1; i <= 7; i++ {
		e.chunkAs("w1", "st-rerun", att, "run2", i, fmt.Sprint("b", i))
	}
	close(g.release)
	names, chunks, _ := openSSE(t, streamGet(t, e.base, "st-rerun", strconv.FormatUint(last, 10))).events(t)
	assert.Equal(t, []string{"b1", "b2", "b3", "b4", "b5", "b6", "b7"}, chunks)
	assert.Equal(t, []string{"invocation", "restart", "chunk", "chunk", "chunk", "chunk", "chunk", "chunk", "chunk", "result"}, names)
}

// TestStreamGapIsAnnounced: the namespace's chunks budget is small and
// other output of the namespace evicts an invocation's early chunks. A
// client resuming after an evicted chunk, and one starting late, each get
// a gap event (naming the first retained chunk) before the chunks that are
// left, never a silent skip.
func TestStreamGapIsAnnounced(t *testing.T) {
	e := newEnv(t, func(c *queue.Config) {
		c.Stream.ChunksConfig.MaxBytes, c.Stream.MaxChunkBytes = 64<<10, 16<<10
	})
	g := newGate()
	e.worker("w1", 1, g.handler)
	s := openSSE(t, streamPost(t, e.base, map[string]any{"stream": true, "invocationID": "st-gap"}))
	require.Equal(t, "st-gap", g.next(t))
	att := e.record("st-gap").Attempt
	var had uint64
	for i := 1; i <= 3; i++ {
		had = e.chunkAs("w1", "st-gap", att, "run", i, fmt.Sprint("c", i))
	}
	s.chunks(t, 3)
	require.NoError(t, s.resp.Body.Close())
	for i := 4; i <= 6; i++ {
		e.chunkAs("w1", "st-gap", att, "run", i, fmt.Sprint("c", i))
	}
	filler := string(make([]byte, 12<<10))
	for i := range 10 { // 120 KiB of the namespace's other output: 1..6 go
		e.chunkAs("w1", fmt.Sprint("other-", i), 1, "x", 1, filler)
	}
	first := e.chunkAs("w1", "st-gap", att, "run", 7, "c7")
	e.chunkAs("w1", "st-gap", att, "run", 8, "c8")
	close(g.release)

	for _, tc := range []struct {
		name, lastEventID string
		missing           int
	}{
		{"resumed after an evicted chunk", strconv.FormatUint(had, 10), 0},
		{"late start", "", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names, chunks, all := openSSE(t, streamGet(t, e.base, "st-gap", tc.lastEventID)).events(t)
			assert.Equal(t, []string{"invocation", "gap", "chunk", "chunk", "result"}, names)
			assert.Equal(t, []string{"c7", "c8"}, chunks)
			var gap v1.StreamGap
			require.NoError(t, json.Unmarshal([]byte(all[1].data), &gap))
			assert.Equal(t, first, gap.FirstRetained)
			assert.Equal(t, tc.missing, gap.Missing)
			assert.Equal(t, strconv.FormatUint(first, 10), all[2].id)
		})
	}
}
