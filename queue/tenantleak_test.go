package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/internal/callerauth/callerauthtest"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/kit"
)

// TestConflictRevealsNoOtherPool (issue #30 item 5): a caller allowed on
// one pool re-posted an invocation ID that exists in another pool of the
// namespace and read that pool's name in the 409 ("already belongs to
// pool \"other\""). The 409 is now word for word the one an ID held by
// the namespace's predecessor gets: the ID is taken, nothing more.
func TestConflictRevealsNoOtherPool(t *testing.T) {
	nss := &incarnations{cached: "uid-1", current: "uid-1"}
	e := newEnv(t, func(c *queue.Config) { c.Namespaces = nss })
	require.Equal(t, 202, e.invoke(map[string]any{"mode": "async", "invocationID": "gone"}).code)
	nss.set("uid-2", "uid-2") // deleted, made again: "gone" is its predecessor's
	theirs := e.do("POST", "/v1/namespaces/default/pools/other/invocations", map[string]any{"mode": "async", "invocationID": "theirs", "payload": "secret"})
	require.Equal(t, 202, theirs.code, "%s", theirs.raw)

	predecessor := e.invoke(map[string]any{"mode": "async", "invocationID": "gone"})
	require.Equal(t, 409, predecessor.code, "%s", predecessor.raw)
	for _, mode := range []string{"async", "sync"} {
		foreign := e.invoke(map[string]any{"mode": mode, "invocationID": "theirs"})
		require.Equal(t, 409, foreign.code, "%s", foreign.raw)
		detail := fmt.Sprint(foreign.body["detail"])
		assert.NotContains(t, detail, `"other"`, "the other pool's name")
		assert.Equal(t, strings.ReplaceAll(fmt.Sprint(predecessor.body["detail"]), "gone", "theirs"), detail)
		assert.NotContains(t, string(foreign.raw), "secret")
	}
}

// TestAnswersCarryNoGlobalCounter (issue #30 item 4): the 202's sequence,
// the Record's sequence and the pool status's invokeSeq are positions in
// the invocation stream every tenant shares; a tenant that invoked twice
// counted everyone's invocations in between. No answer carries them: not
// the async ack, the sync 200, GET, a stream's result event, nor GET pool
// (whose status the activator wrote with invokeSeq, which the ingress
// still reads); nor (issue #32) the stream's name, subjects or request hash.
func TestAnswersCarryNoGlobalCounter(t *testing.T) {
	e := newEnv(t, nil)
	e.worker("w1", 2, nil)
	async := e.invoke(map[string]any{"mode": "async", "invocationID": "a1"})
	require.Equal(t, 202, async.code, "%s", async.raw)
	sync := e.invoke(map[string]any{"mode": "sync", "invocationID": "s1"})
	require.Equal(t, 200, sync.code, "%s", sync.raw)
	e.waitState("a1", messages.StateSucceeded, 10*time.Second)
	e.waitState("s1", messages.StateSucceeded, 10*time.Second)
	// What is kept inside: the Records' sequences and the status's invokeSeq.
	sc := e.cfg.Stream.WithDefaults()
	recs, err := e.js.KeyValue(context.Background(), sc.RecordsBucket)
	require.NoError(t, err)
	kv, err := recs.Get(context.Background(), stream.Key("default", "s1"))
	require.NoError(t, err)
	require.Contains(t, string(kv.Value()), `"sequence"`, "the stored Record keeps its sequence")
	pools, err := e.js.KeyValue(context.Background(), sc.PoolsBucket)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		kv, err := pools.Get(context.Background(), stream.PoolKey("default", testPool))
		var ps messages.PoolStatus
		return err == nil && json.Unmarshal(kv.Value(), &ps) == nil && ps.InvokeSeq != nil && *ps.InvokeSeq > 0
	}, 10*time.Second, 20*time.Millisecond, "the activator's status has invokeSeq")

	req, err := http.NewRequest("GET", e.base+"/v1/namespaces/default/invocations/s1/stream", nil)
	require.NoError(t, err)
	resp, err := httpClient().Do(req)
	require.NoError(t, err)
	streamed, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Contains(t, string(streamed), "event: result")

	for name, raw := range map[string]string{
		"async 202":    string(async.raw),
		"sync 200":     string(sync.raw),
		"GET":          string(e.do("GET", "/v1/namespaces/default/invocations/a1", nil).raw),
		"stream":       string(streamed),
		"GET pool":     string(e.do("GET", "/v1/namespaces/default/pools/"+testPool, nil).raw),
		"re-post":      string(e.invoke(map[string]any{"mode": "async", "invocationID": "a1"}).raw),
		"sync re-post": string(e.invoke(map[string]any{"mode": "sync", "invocationID": "s1"}).raw),
	} {
		assert.NotContains(t, raw, `"sequence"`, name)
		assert.NotContains(t, raw, `"invokeSeq"`, name)
		// Nor other internals (issue #32): the shared stream's name, NATS
		// subjects, the request hash.
		for _, internal := range []string{`"stream":`, `"subjects"`, "runtime.serverless", sc.Stream, `"requestHash"`, `"namespaceUID"`} {
			assert.NotContains(t, raw, internal, name)
		}
	}
}

// BenchmarkExistenceAcrossNamespaces (issue #30 item 5): mallory, who may
// use namespace team-b only, GETs invocation IDs of namespace default:
// existing ones (of pool other) and unknown ones, interleaved. Both get
// the same 403; the benchmark reports the median time of each (µs, on
// the loopback, the embedded nats-server and an authorizer whose answers
// cost what callerauth's cached ones do) and their difference, the
// timing signal left (SECURITY.md):
//
//	go test ./queue/ -run XXX -bench ExistenceAcrossNamespaces -benchtime 3000x -count 5
func BenchmarkExistenceAcrossNamespaces(b *testing.B) {
	auth := callerauthtest.Static{Users: map[string]string{"tok-admin": "admin", "tok-b": "mallory"},
		May: func(u string, req callerauth.Request) bool { return u == "admin" || req.Namespace == "team-b" }}
	e := newEnv(b, func(c *queue.Config) { c.CallerAuthorizer = auth })
	client := &http.Client{}
	call := func(tok, method, path, body string) (int, []byte, time.Duration) {
		req, err := http.NewRequest(method, e.base+path, strings.NewReader(body))
		require.NoError(b, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		start := time.Now()
		resp, err := client.Do(req)
		require.NoError(b, err)
		raw, err := io.ReadAll(resp.Body)
		took := time.Since(start)
		require.NoError(b, err)
		require.NoError(b, resp.Body.Close())
		return resp.StatusCode, raw, took
	}
	const ids = 64
	for i := range ids {
		code, raw, _ := call("tok-admin", "POST", "/v1/namespaces/default/pools/other/invocations", fmt.Sprintf(`{"mode":"async","invocationID":"x-%d"}`, i))
		require.Equal(b, 202, code, "%s", raw)
	}
	var existing, unknown []time.Duration
	probe := func(i int, known bool) {
		id := fmt.Sprintf("u-%d", i%ids)
		if known {
			id = fmt.Sprintf("x-%d", i%ids)
		}
		code, raw, took := call("tok-b", "GET", "/v1/namespaces/default/invocations/"+id, "")
		require.Equal(b, 403, code, "%s", raw)
		require.False(b, bytes.Contains(raw, []byte(id)), "%s", raw)
		if known {
			existing = append(existing, took)
		} else {
			unknown = append(unknown, took)
		}
	}
	b.ResetTimer()
	for i := range b.N {
		// Alternately first: neither kind always finds the connection warmer.
		probe(i, i%2 == 0)
		probe(i, i%2 != 0)
	}
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	me, mu := us(kit.Median(existing)), us(kit.Median(unknown))
	b.ReportMetric(me, "existing-µs")
	b.ReportMetric(mu, "unknown-µs")
	b.ReportMetric(me-mu, "diff-µs")
	b.ReportMetric(0, "ns/op")
}

// TestForeignIDsAnswerAsUnknown: with callers (an authorizer standing for
// RBAC), an invocation a caller may not see answers exactly as an ID
// never used, on GET, stream and cancel — whether the caller has no right
// in the namespace (mallory) or rights on another pool of it (alice) —
// and the caller allowed answers as before.
func TestForeignIDsAnswerAsUnknown(t *testing.T) {
	auth := callerauthtest.Static{Users: map[string]string{"tok-admin": "admin", "tok-alice": "alice", "tok-mallory": "mallory"},
		May: func(u string, req callerauth.Request) bool {
			switch u {
			case "admin":
				return true
			case "alice":
				return req.Namespace == "default" && req.Pool == "other"
			}
			return req.Namespace == "team-b"
		}}
	e := newEnv(t, func(c *queue.Config) { c.CallerAuthorizer = auth })
	call := func(tok, method, path string) (int, string) {
		req, err := http.NewRequest(method, e.base+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := httpClient().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	req, err := http.NewRequest("POST", e.base+"/v1/namespaces/default/pools/echo/invocations", strings.NewReader(`{"mode":"async","invocationID":"x"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer tok-admin")
	resp, err := httpClient().Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, 202, resp.StatusCode)

	for _, tok := range []string{"tok-mallory", "tok-alice"} {
		for _, route := range []struct{ method, suffix string }{{"GET", ""}, {"GET", "/stream"}, {"POST", "/cancel"}} {
			code, existing := call(tok, route.method, "/v1/namespaces/default/invocations/x"+route.suffix)
			assert.Equal(t, 403, code, "%s %s: %s", tok, route, existing)
			_, unknown := call(tok, route.method, "/v1/namespaces/default/invocations/never"+route.suffix)
			assert.Equal(t, unknown, strings.ReplaceAll(existing, "/x", "/never"), "%s %s", tok, route)
		}
	}
	code, body := call("tok-admin", "GET", "/v1/namespaces/default/invocations/x")
	assert.Equal(t, 200, code, body)
	code, body = call("tok-admin", "GET", "/v1/namespaces/default/invocations/never")
	assert.Equal(t, 404, code, body)
}
