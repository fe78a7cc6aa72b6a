package queue_test

import (
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

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/stream"
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
// still reads).
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
		var ps stream.PoolStatus
		return err == nil && json.Unmarshal(kv.Value(), &ps) == nil && ps.InvokeSeq > 0
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
	}
}
