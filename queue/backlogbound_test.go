package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/queue/queuetest"
	"github.com/runplane/runplane/queue/stream"
)

// boundedPool is the pool of these tests: runplane.io/max-backlog n.
func boundedPool(n int) func(*queue.Config) {
	pol := pool.DefaultPolicy()
	pol.MaxBacklog = n
	return func(c *queue.Config) {
		c.StaticPools = []string{"team-a/p"}
		c.StaticPolicies = map[string]pool.Policy{pool.StaticKey("team-a", "p"): pol}
	}
}

// postP posts an async invocation of team-a/p (id "": the ingress names it).
func (e *env) postP(id string) resp {
	e.t.Helper()
	body := map[string]any{"mode": "async"}
	if id != "" {
		body["invocationID"] = id
	}
	return e.do("POST", invocations("team-a", "p"), body)
}

// statusP is the status of team-a/p as the activator wrote it in the
// pool-status bucket, InvokeSeq included (false: none written).
func (e *env) statusP() (messages.PoolStatus, bool) {
	e.t.Helper()
	kv, err := e.js.KeyValue(context.Background(), e.cfg.Stream.WithDefaults().PoolsBucket)
	require.NoError(e.t, err)
	en, err := kv.Get(context.Background(), stream.PoolKey("team-a", "p"))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return messages.PoolStatus{}, false
	}
	require.NoError(e.t, err)
	var ps messages.PoolStatus
	require.NoError(e.t, json.Unmarshal(en.Value(), &ps))
	return ps, true
}

// TestBacklogBoundBeforeTakeIn: a pool's max-backlog holds exactly, also
// while the activator has taken none of its invocations in and publishes a
// status of the pool (as for a pool it has just learned: its first status
// says it took nothing of it in). The activator's invoke consumer is
// paused (the server delivers nothing), the pool takes max-backlog
// invocations, and a worker appears: the activator's next status shows it
// (Capacity 1), and the ingress's 429s say Retry-After 1 once it has that
// status — the barrier. Every invocation beyond max-backlog is refused,
// before and after it: the status covers only what the activator took in.
// (A status without InvokeSeq covered everything the ingress had accepted,
// and the next invocation was accepted.)
func TestBacklogBoundBeforeTakeIn(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("max-backlog %d", n), func(t *testing.T) {
			e := newEnv(t, boundedPool(n))
			ctx := context.Background()
			sc := e.cfg.Stream.WithDefaults()
			_, err := e.js.PauseConsumer(ctx, sc.Stream, "activator-invoke", time.Now().Add(time.Hour))
			require.NoError(t, err)
			for i := range n {
				r := e.postP(fmt.Sprint("held-", i))
				require.Equal(t, 202, r.code, "%d: %s", i, r.raw)
			}
			r := e.postP("")
			require.Equal(t, 429, r.code, "%s", r.raw)
			require.Equal(t, "5", r.header.Get("Retry-After"), "no worker yet")

			e.tenantWorker("team-a", "p", "w", 1, nil)
			deadline := time.Now().Add(20 * time.Second)
			for r.header.Get("Retry-After") != "1" {
				require.True(t, time.Now().Before(deadline), "the ingress never had the status showing the worker")
				time.Sleep(20 * time.Millisecond) // a poll's pace, not a barrier: the answer below is
				r = e.postP("")
				require.Equal(t, 429, r.code, "an invocation beyond max-backlog %d: %s", n, r.raw)
			}
			// That answer may have read the limit just before the status:
			// one more after it.
			r = e.postP("")
			require.Equal(t, 429, r.code, "an invocation beyond max-backlog %d after the status: %s", n, r.raw)
			ps, ok := e.statusP()
			require.True(t, ok)
			assert.Zero(t, ps.Backlog, "nothing taken in")
			require.NotNil(t, ps.InvokeSeq, "the status says how far the activator took the stream in")

			_, err = e.js.ResumeConsumer(ctx, sc.Stream, "activator-invoke")
			require.NoError(t, err)
			for i := range n {
				e.waitStateIn("team-a", fmt.Sprint("held-", i), messages.StateSucceeded)
			}
		})
	}
}

// TestBacklogBoundAfterActivatorRestart: an idle pool whose invocations a
// previous activator finished, without ever publishing a status that
// covered them (it stopped first: here its tick never came), takes
// invocations again once a new activator runs — exactly max-backlog of
// them. The ingress and the activator run apart, so the ingress keeps its
// count across the activator's restart. The new activator took nothing of
// the pool in: its status must still cover what the previous one handled
// (a status read as covering nothing kept them counted for ever).
func TestBacklogBoundAfterActivatorRestart(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("max-backlog %d", n), func(t *testing.T) {
			e := newEnv(t, func(c *queue.Config) {
				boundedPool(n)(c)
				c.DisableActivator = true
			})
			first := e.startActivator(time.Hour)
			w := e.tenantWorker("team-a", "p", "w", 1, nil)
			for i := range n {
				r := e.postP(fmt.Sprint("early-", i))
				require.Equal(t, 202, r.code, "%d: %s", i, r.raw)
			}
			for i := range n {
				e.waitStateIn("team-a", fmt.Sprint("early-", i), messages.StateSucceeded)
			}
			e.invokeAcked()
			_, ok := e.statusP()
			require.False(t, ok, "the first activator published no status")
			r := e.postP("")
			require.Equal(t, 429, r.code, "the ingress still counts what no status covered: %s", r.raw)

			require.NoError(t, w.Stop())
			first()
			e.startActivator(50 * time.Millisecond)
			// Admitted again once the new activator's status covers what
			// the first one finished.
			require.Eventually(t, func() bool { return e.postP("late-0").code == 202 }, 20*time.Second, 50*time.Millisecond,
				"an idle pool after an activator restart refused for ever")
			for i := 1; i < n; i++ {
				r := e.postP(fmt.Sprint("late-", i))
				require.Equal(t, 202, r.code, "%d: %s", i, r.raw)
			}
			r = e.postP("")
			require.Equal(t, 429, r.code, "beyond max-backlog %d: %s", n, r.raw)
			// And once the activator's status shows them all queued.
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				ps, ok := e.statusP()
				assert.True(c, ok)
				assert.Equal(c, n, ps.Backlog)
			}, 10*time.Second, 20*time.Millisecond)
			r = e.postP("")
			require.Equal(t, 429, r.code, "beyond max-backlog %d: %s", n, r.raw)
		})
	}
}

// TestBacklogBoundMessageRemovedBeforeTakeIn: an invocation cancelled
// while queued whose message leaves the stream before the activator
// delivered it (the activator's sweep at a start removes the messages of
// final Records; here the test removes it, the consumer paused) is never
// taken in, yet stops counting: once the consumer goes past it, the
// server's word (its ack floor, with nothing unacked the last sequence it
// went past) moves the pool's position past it — nothing else would, and
// a pool of max-backlog 1 would refuse for ever.
func TestBacklogBoundMessageRemovedBeforeTakeIn(t *testing.T) {
	e := newEnv(t, boundedPool(1))
	ctx := context.Background()
	sc := e.cfg.Stream.WithDefaults()
	_, err := e.js.PauseConsumer(ctx, sc.Stream, "activator-invoke", time.Now().Add(time.Hour))
	require.NoError(t, err)
	r := e.postP("gone")
	require.Equal(t, 202, r.code, "%s", r.raw)
	require.Equal(t, 429, e.postP("").code)
	r = e.do("POST", "/v1/namespaces/team-a/invocations/gone/cancel", nil)
	require.Equal(t, 200, r.code, "%s", r.raw)
	st, err := e.js.Stream(ctx, sc.Stream)
	require.NoError(t, err)
	m, err := st.GetLastMsgForSubject(ctx, e.subj.Invoke("team-a", "p"))
	require.NoError(t, err)
	require.NoError(t, st.DeleteMsg(ctx, m.Sequence)) //nolint:forbidigo // the message removed before take-in, as a sweep would: the test wants the raw delete
	_, err = e.js.ResumeConsumer(ctx, sc.Stream, "activator-invoke")
	require.NoError(t, err)

	require.Eventually(t, func() bool { return e.postP("after").code == 202 }, 20*time.Second, 50*time.Millisecond,
		"a removed message counted for ever")
	r = e.postP("")
	require.Equal(t, 429, r.code, "beyond max-backlog 1: %s", r.raw)
}

// startActivator runs an activator alone (no ingress) on e's NATS and
// configuration, ticking every tick, and returns its stop.
func (e *env) startActivator(tick time.Duration) func() {
	e.t.Helper()
	cfg := e.cfg
	cfg.DisableActivator, cfg.DisableIngress, cfg.MetricsListen, cfg.Tick = false, true, "", tick
	q := queuetest.Run(e.t, cfg)
	e.waitActivator()
	return func() { require.NoError(e.t, q.Stop()) }
}

// invokeAcked waits until the activator's invoke consumer has nothing
// pending or unacked.
func (e *env) invokeAcked() {
	e.t.Helper()
	sc := e.cfg.Stream.WithDefaults()
	require.EventuallyWithT(e.t, func(c *assert.CollectT) {
		con, err := e.js.Consumer(context.Background(), sc.Stream, "activator-invoke")
		if !assert.NoError(c, err) {
			return
		}
		info := con.CachedInfo()
		assert.Zero(c, info.NumPending, "pending")
		assert.Zero(c, info.NumAckPending, "unacked")
	}, 10*time.Second, 20*time.Millisecond)
}

// waitStateIn waits until invocation id of namespace ns is in state want.
func (e *env) waitStateIn(ns, id string, want messages.State) {
	e.t.Helper()
	require.EventuallyWithT(e.t, func(c *assert.CollectT) {
		var rec messages.Record
		assert.NoError(c, json.Unmarshal(e.do("GET", "/v1/namespaces/"+ns+"/invocations/"+id, nil).raw, &rec))
		assert.Equal(c, want, rec.State, "invocation %s/%s", ns, id)
	}, 20*time.Second, 20*time.Millisecond)
}
