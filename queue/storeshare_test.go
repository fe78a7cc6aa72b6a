package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/ingress"
	"github.com/runplane/runplane/queue/queuetest"
	"github.com/runplane/runplane/queue/stream"
)

// bigPayload is a JSON string payload of about n bytes: one message (below
// NATS's 1 MiB max_payload), as the probe's 900 KB calls.
func bigPayload(n int) string { return `"` + strings.Repeat("x", n) + `"` }

// okWorker starts a worker (the real sidecar) of pool ns/p answering "ok" (a small
// result).
func (e *env) okWorker(ns, p, name string) {
	e.t.Helper()
	e.tenantWorker(ns, p, name, 4, func(context.Context, framework.Request) (framework.Response, error) {
		return framework.Response{StatusCode: 200, ContentType: "application/json", Body: []byte(`"ok"`)}, nil
	})
}

func (e *env) invokeIn(ns, p string, body string) resp {
	return e.do("POST", "/v1/namespaces/"+ns+"/pools/"+p+"/invocations", body)
}

func (e *env) streamState() jetstream.StreamState {
	e.t.Helper()
	st, err := e.js.Stream(context.Background(), e.cfg.Stream.WithDefaults().Stream)
	require.NoError(e.t, err)
	info, err := st.Info(context.Background())
	require.NoError(e.t, err)
	return info.State
}

// waitStreamEmpty is the barrier on the activator's deletes: the stream
// holds no message of any invocation.
func (e *env) waitStreamEmpty(why string) {
	e.t.Helper()
	require.EventuallyWithT(e.t, func(c *assert.CollectT) {
		s := e.streamState()
		assert.Zero(c, s.Msgs, "messages")
		assert.Zero(c, s.Bytes, "bytes")
	}, 20*time.Second, 20*time.Millisecond, why)
}

// TestFinishedWorkLeavesTheStream is the probe's case: on a 16 MiB
// invocation stream, tenant A's sync calls of 900 KB used to stay there
// (with their Dispatches) for the stream's max age, until the store guard
// refused every tenant's new work (503 at 40%). Finished invocations now
// leave the stream: A's calls all succeed, the stream is empty after them,
// and tenant B is served.
func TestFinishedWorkLeavesTheStream(t *testing.T) {
	e := newEnv(t, func(c *queue.Config) {
		c.StaticPools = []string{"tenant-a/p", "tenant-b/p"}
		c.Stream.MaxBytes = 16 << 20
	})
	e.okWorker("tenant-a", "p", "wa")
	e.okWorker("tenant-b", "p", "wb")
	// Finished work leaves in batches and the store guard counts what this
	// replica stored since its last read of the stream (Storage,
	// "Purges"): at load, a call may find the guard's count above 40% for
	// a moment and be refused (503, nothing accepted) until it reads the
	// stream again. Had the finished calls stayed, the stream would stay
	// full and no post again would succeed.
	post := func(ns, body string) resp {
		var r resp
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			r = e.invokeIn(ns, "p", body)
			assert.NotEqual(c, http.StatusServiceUnavailable, r.code, "%s: %s", ns, r.raw)
		}, 10*time.Second, 100*time.Millisecond)
		return r
	}
	payload := bigPayload(900 << 10)
	for i := range 12 { // 12 × 2 × 900 KB: 21 MB, beyond the stream's 16 MiB
		r := post("tenant-a", fmt.Sprintf(`{"mode":"sync","invocationID":"a-%d","payload":%s}`, i, payload))
		require.Equal(t, 200, r.code, "tenant-a call %d: %s", i, r.raw)
		require.Equal(t, "succeeded", r.body["state"])
	}
	e.waitStreamEmpty("tenant-a's finished invocations left the stream")
	r := post("tenant-b", `{"mode":"sync","invocationID":"b-0","payload":{"n":1}}`)
	require.Equal(t, 200, r.code, "tenant-b: %s", r.raw)
	e.waitStreamEmpty("tenant-b's too")
	// Idempotency stands on the Record: a re-post of a finished ID answers
	// it, publishes nothing, and runs nothing again — at once, not retried:
	// a duplicate is answered before the store guard is asked.
	r = e.invokeIn("tenant-a", "p", fmt.Sprintf(`{"mode":"sync","invocationID":"a-0","payload":%s}`, payload))
	require.Equal(t, 200, r.code, "%s", r.raw)
	require.Equal(t, "succeeded", r.body["state"])
	require.Zero(t, e.streamState().Msgs, "a re-post of a finished invocation stores nothing")
}

// TestNamespaceStreamBudget: a namespace's queued invocations may hold at
// most its byte budget of the shared stream; beyond, 429 for it only
// (problem details naming the budget, Retry-After), while another tenant
// is accepted. The share is counted from the Records, so it holds after a
// restart, and it comes back as the namespace's work finishes.
func TestNamespaceStreamBudget(t *testing.T) {
	// Two queued invocations of 900 KB, each counted with room for its
	// Dispatch, fit; a third does not.
	const budget = 4 << 20
	e := newEnv(t, func(c *queue.Config) {
		c.StaticPools = []string{"tenant-a/p", "tenant-b/p"}
		c.Stream.MaxBytes = 64 << 20
		c.Limits.NamespaceMaxStreamBytes = budget
	})
	payload := bigPayload(900 << 10)
	post := func(ns, id string) resp {
		return e.invokeIn(ns, "p", fmt.Sprintf(`{"mode":"async","invocationID":%q,"payload":%s}`, id, payload))
	}
	refused := func(r resp, ns string) {
		t.Helper()
		require.Equal(t, 429, r.code, "%s", r.raw)
		require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
		require.NotEmpty(t, r.header.Get("Retry-After"))
		require.Equal(t, "namespace_stream_bytes", r.body["limit"])
		require.Equal(t, ns, r.body["namespace"])
		require.EqualValues(t, budget, r.body["max"])
		require.Contains(t, r.body["detail"], "namespaceMaxStreamBytes")
	}
	require.Equal(t, 202, post("tenant-a", "a-0").code)
	require.Equal(t, 202, post("tenant-a", "a-1").code)
	refused(post("tenant-a", "a-2"), "tenant-a")
	// A re-post of an accepted ID is still answered.
	require.Equal(t, 202, post("tenant-a", "a-1").code)
	for i := range 2 {
		require.Equal(t, 202, post("tenant-b", fmt.Sprintf("b-%d", i)).code, "tenant-b is not held by tenant-a's share")
	}

	// Another ingress replica counts the same, from the store.
	func() {
		defer e.atReplica()()
		refused(post("tenant-a", "a-2"), "tenant-a")
		require.Equal(t, 202, e.invokeIn("tenant-b", "p", `{"mode":"async","invocationID":"b-2","payload":{"n":2}}`).code)
	}()

	// Derived from the store: a restarted queue counts the same.
	e.stop()
	e.startQueue()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 200, e.do("GET", "/readyz", nil).code)
	}, 20*time.Second, 20*time.Millisecond, "counted")
	refused(post("tenant-a", "a-2"), "tenant-a")

	// A's work finishes: its share comes back.
	e.okWorker("tenant-a", "p", "wa")
	for _, id := range []string{"a-0", "a-1"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			r := e.do("GET", "/v1/namespaces/tenant-a/invocations/"+id, nil)
			assert.Equal(c, "succeeded", r.body["state"])
		}, 20*time.Second, 20*time.Millisecond, id)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 202, post("tenant-a", "a-2").code)
	}, 10*time.Second, 20*time.Millisecond, "tenant-a accepted again once its work finished")
}

// TestNamespaceRecordBudget: a namespace's Records (with their results,
// kept -record-ttl) may hold at most its byte budget of the shared bucket:
// beyond, 429 for it only.
func TestNamespaceRecordBudget(t *testing.T) {
	const budget = 2 << 20
	e := newEnv(t, func(c *queue.Config) {
		c.StaticPools = []string{"tenant-a/p", "tenant-b/p"}
		c.Limits.NamespaceMaxRecordBytes = budget
	})
	e.tenantWorker("tenant-a", "p", "wa", 4, nil) // echoes its payload
	e.okWorker("tenant-b", "p", "wb")
	payload := bigPayload(600 << 10)
	var last resp
	for i := range 10 {
		last = e.invokeIn("tenant-a", "p", fmt.Sprintf(`{"mode":"sync","invocationID":"a-%d","payload":%s}`, i, payload))
		if last.code != 200 {
			require.GreaterOrEqual(t, i, 2, "at least two results fit: %s", last.raw)
			break
		}
	}
	require.Equal(t, 429, last.code, "%s", last.raw)
	require.Equal(t, "namespace_record_bytes", last.body["limit"])
	require.Equal(t, "tenant-a", last.body["namespace"])
	require.NotEmpty(t, last.header.Get("Retry-After"))
	require.Contains(t, last.body["detail"], "namespaceMaxRecordBytes")
	r := e.invokeIn("tenant-b", "p", `{"mode":"sync","invocationID":"b-0","payload":{"n":1}}`)
	require.Equal(t, 200, r.code, "tenant-b: %s", r.raw)
}

// TestSweepRemovesLeftovers: messages a leader left in the stream (it
// stopped between a final Record and its deletes) are removed at the next
// start: those of final Records, and a dead letter whose Record is gone;
// an open invocation's message stays.
func TestSweepRemovesLeftovers(t *testing.T) {
	e := newEnv(t, nil)
	e.stop()
	ctx := context.Background()
	sc := e.cfg.Stream.WithDefaults()
	kv, err := e.js.KeyValue(ctx, sc.RecordsBucket)
	require.NoError(t, err)
	put := func(id string, state messages.State) {
		b, err := json.Marshal(messages.Record{InvocationID: id, Namespace: "default", Pool: testPool, State: state, AcceptedAt: time.Now(), UpdatedAt: time.Now()})
		require.NoError(t, err)
		_, err = kv.Put(ctx, stream.Key("default", id), b)
		require.NoError(t, err)
	}
	publish := func(subject, msgID, id string) {
		b, err := json.Marshal(messages.Invocation{InvocationID: id, Namespace: "default", Pool: testPool, Mode: messages.ModeAsync, AcceptedAt: time.Now(),
			TimeoutSeconds: 60, TTLSeconds: 600})
		require.NoError(t, err)
		_, err = e.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: b}, jetstream.WithMsgID(msgID))
		require.NoError(t, err)
	}
	put("done", messages.StateSucceeded)
	publish(e.subj.Invoke("default", testPool), messages.MsgID("default", "done"), "done")
	publish(e.subj.Dispatch("default", testPool, "w-gone"), messages.DispatchPublishID("default", "done", 1), "done")
	publish(e.subj.DeadLetter("default", testPool), messages.MsgID("default", "expired")+".deadletter", "expired")
	put("open", messages.StateQueued)
	publish(e.subj.Invoke("default", testPool), messages.MsgID("default", "open"), "open")
	require.EqualValues(t, 4, e.streamState().Msgs)

	e.startQueue()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.EqualValues(c, 1, e.streamState().Msgs, "only the open invocation's message is left")
	}, 20*time.Second, 20*time.Millisecond)
	e.worker("w", 1, nil)
	e.waitState("open", messages.StateSucceeded, 20*time.Second)
	e.waitStreamEmpty("the open one's messages went once it finished")
}

// atReplica starts a second queue replica (ingress only) on the same NATS,
// waits until it is ready, and points e's requests at it until the
// returned func is called.
func (e *env) atReplica() func() {
	e.t.Helper()
	cfg := e.cfg
	cfg.DisableActivator, cfg.MetricsListen = true, ""
	q := queuetest.Run(e.t, cfg)
	stop := func() { require.NoError(e.t, q.Stop()) }
	base := e.base
	e.base = q.Base
	require.EventuallyWithT(e.t, func(c *assert.CollectT) {
		assert.Equal(c, 200, e.do("GET", "/readyz", nil).code)
	}, 20*time.Second, 20*time.Millisecond, "the replica counted the Records")
	return func() { e.base = base; stop() }
}

// TestCancelledWorkHoldsItsShare: a cancelled invocation's messages stay
// in the stream until the activator meets it (its pool's next dispatch, or
// its ttlSeconds), so its namespace's share is given back only then:
// posting and cancelling in a loop cannot fill the shared stream.
func TestCancelledWorkHoldsItsShare(t *testing.T) {
	e := newEnv(t, func(c *queue.Config) {
		c.StaticPools = []string{"tenant-a/p"}
		c.Limits.NamespaceMaxStreamBytes = 4 << 20
	})
	payload := bigPayload(900 << 10)
	post := func(id string) resp {
		return e.invokeIn("tenant-a", "p", fmt.Sprintf(`{"mode":"async","invocationID":%q,"payload":%s}`, id, payload))
	}
	for _, id := range []string{"c-0", "c-1"} {
		require.Equal(t, 202, post(id).code)
		require.Equal(t, 200, e.do("POST", "/v1/namespaces/tenant-a/invocations/"+id+"/cancel", nil).code)
	}
	r := post("c-2")
	require.Equal(t, 429, r.code, "the cancelled invocations' messages are still in the stream: %s", r.raw)
	require.Equal(t, "namespace_stream_bytes", r.body["limit"])

	e.okWorker("tenant-a", "p", "wa") // the activator meets them, finds them cancelled
	e.waitStreamEmpty("cancelled invocations left the stream")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 202, post("c-2").code)
	}, 10*time.Second, 20*time.Millisecond, "the share is back once they are gone")
}

// waitInvokesTaken is the barrier on the activator's invoke consumer: it
// has taken (and acked) every invocation message stored.
func (e *env) waitInvokesTaken(why string) {
	e.t.Helper()
	sc := e.cfg.Stream.WithDefaults()
	require.EventuallyWithT(e.t, func(c *assert.CollectT) {
		cons, err := e.js.Consumer(context.Background(), sc.Stream, "activator-invoke")
		if !assert.NoError(c, err) {
			return
		}
		info, err := cons.Info(context.Background())
		if !assert.NoError(c, err) {
			return
		}
		assert.Zero(c, info.NumPending, "pending")
		assert.Zero(c, info.NumAckPending, "ack pending")
		assert.Equal(c, e.streamState().LastSeq, info.AckFloor.Stream, "acked up to the last message")
	}, 20*time.Second, 20*time.Millisecond, why)
}

// TestRepostStoresNoCopies: re-posting a queued invocation after the
// duplicate window used to publish a full copy every time — uncounted in
// the namespace's share, acked but never deleted by the activator, so a
// tenant could fill the shared stream with one invocation. Now a re-post
// publishes at most one copy per duplicate window, and the activator
// removes a copy of an invocation it already holds.
func TestRepostStoresNoCopies(t *testing.T) {
	e := newEnv(t, func(c *queue.Config) {
		c.StaticPools = []string{"tenant-a/p"}
		c.Limits.NamespaceMaxStreamBytes = 4 << 20
	})
	body := fmt.Sprintf(`{"mode":"async","invocationID":"q-0","payload":%s}`, bigPayload(100<<10))
	require.Equal(t, 202, e.invokeIn("tenant-a", "p", body).code)
	// No worker: q-0 stays queued. Re-posts across three duplicate windows
	// (1s in the tests).
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		r := e.invokeIn("tenant-a", "p", body)
		require.Equal(t, 202, r.code, "%s", r.raw)
		require.Equal(t, true, r.body["duplicate"])
	}
	e.waitInvokesTaken("the activator took every copy")
	s := e.streamState()
	require.EqualValues(t, 1, s.Msgs, "one message for the one queued invocation")
	require.Less(t, s.Bytes, uint64(200<<10))
}

// TestStreamShareCountsEncodedBytes: the share of the stream is what the
// stored message holds. A payload of '<' used to be counted at its raw
// size while encoding/json stored each '<' as \u003c (6 bytes): a tenant
// held six times its budget.
func TestStreamShareCountsEncodedBytes(t *testing.T) {
	const budget = 1 << 20
	e := newEnv(t, func(c *queue.Config) {
		c.StaticPools = []string{"tenant-a/p"}
		c.Limits.NamespaceMaxStreamBytes = budget
	})
	payload := `"` + strings.Repeat("<", 100<<10) + `"`
	var last resp
	for i := range 30 {
		last = e.invokeIn("tenant-a", "p", fmt.Sprintf(`{"mode":"async","invocationID":"lt-%d","payload":%s}`, i, payload))
		if last.code != 202 {
			break
		}
	}
	require.Equal(t, 429, last.code, "%s", last.raw)
	require.LessOrEqual(t, e.streamState().Bytes, uint64(budget), "the namespace's messages fit its budget")
}

// TestFullStoreRefusesOnlyTheHeavy: at the store's accept point (40% of
// the stream) new work used to be refused for every namespace, so a few
// tenants at their budgets blocked all. Now from 30% only the namespaces
// holding their fair share of it or more are refused: heavy tenants stop
// there, and a namespace holding little is still served, up to 40%.
func TestFullStoreRefusesOnlyTheHeavy(t *testing.T) {
	e := newEnv(t, func(c *queue.Config) {
		c.StaticPools = []string{"tenant-a/p", "tenant-b/p", "tenant-c/p"}
		c.Stream.MaxBytes = 16 << 20
	})
	payload := bigPayload(900 << 10)
	post := func(ns, id, payload string) resp {
		return e.invokeIn(ns, "p", fmt.Sprintf(`{"mode":"async","invocationID":%q,"payload":%s}`, id, payload))
	}
	// Tenant A (no workers: its work stays queued) fills the stream past
	// its accept point.
	var last resp
	for i := range 16 {
		if last = post("tenant-a", fmt.Sprintf("a-%d", i), payload); last.code != 202 {
			break
		}
	}
	require.Equal(t, 503, last.code, "%s", last.raw)
	require.Contains(t, last.body["error"], `namespace "tenant-a"`)
	require.Contains(t, last.body["error"], "fair share")
	held := e.streamState().Bytes
	require.GreaterOrEqual(t, held, uint64(16<<20)/100*ingress.StreamFairPercent, "past the fair-share point")

	// B and C hold nothing: they are served.
	r := post("tenant-b", "b-0", payload)
	require.Equal(t, 202, r.code, "tenant-b holds nothing of the store: %s", r.raw)
	require.Equal(t, 202, post("tenant-c", "c-0", `{"n":1}`).code, "tenant-c holds nothing of the store")
	// A, still heavy, is refused; so is B once it holds its fair share
	// (40% over the three namespaces holding some).
	require.Equal(t, 503, post("tenant-a", "a-9", `{"n":1}`).code)
	require.Equal(t, 503, post("tenant-b", "b-1", payload).code, "tenant-b at its fair share")
	require.Equal(t, 202, post("tenant-c", "c-1", `{"n":2}`).code, "tenant-c well below its")
}
