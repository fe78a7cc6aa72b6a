package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/sidecar/sidecartest"
)

func invocations(ns, poolName string) string {
	return "/v1/namespaces/" + ns + "/pools/" + poolName + "/invocations"
}

// TestBacklogLimits: a namespace's backlog limit answers 429 to that
// namespace only, naming the limit, the namespace and the pool, with
// Retry-After; a pool's runplane.io/max-backlog bounds that pool only; a
// re-post of an accepted ID is still answered; draining admits again.
func TestBacklogLimits(t *testing.T) {
	small := pool.DefaultPolicy()
	small.MaxBacklog = 1
	e := newEnv(t, func(c *queue.Config) {
		c.StaticPools = []string{"team-a/p1", "team-a/p2", "team-b/p1", "team-b/small"}
		c.StaticPolicies = map[string]pool.Policy{"team-b/small": small}
		c.Limits = pool.Limits{PoolMaxBacklog: 100, NamespaceMaxBacklog: 3}
	})
	steps := []struct {
		ns, pool, id string
		code         int
		limit        string
	}{
		{"team-a", "p1", "a1", 202, ""},
		{"team-a", "p1", "a2", 202, ""},
		{"team-a", "p2", "a3", 202, ""},
		{"team-a", "p2", "a4", 429, "namespace_backlog"},
		{"team-a", "p1", "", 429, "namespace_backlog"},
		{"team-a", "p1", "a1", 202, ""}, // a re-post is answered when full
		{"team-b", "p1", "b1", 202, ""}, // another tenant is admitted
		{"team-b", "small", "b2", 202, ""},
		{"team-b", "small", "b3", 429, "pool_backlog"},
		{"team-b", "p1", "b4", 202, ""}, // the pool limit holds that pool only
	}
	for i, st := range steps {
		body := map[string]any{"mode": "async"}
		if st.id != "" {
			body["invocationID"] = st.id
		}
		r := e.do("POST", invocations(st.ns, st.pool), body)
		require.Equal(t, st.code, r.code, "step %d %+v: %s", i, st, r.raw)
		if st.code != 429 {
			continue
		}
		assert.Equal(t, st.limit, r.body["limit"], "step %d", i)
		assert.Equal(t, st.ns, r.body["namespace"], "step %d", i)
		assert.Equal(t, st.pool, r.body["pool"], "step %d", i)
		assert.Contains(t, r.body["error"], st.ns, "step %d", i)
		assert.NotEmpty(t, r.header.Get("Retry-After"), "step %d", i)
	}
	metrics, err := e.metrics()
	require.NoError(t, err)
	assert.Contains(t, metrics, `runplane_ingress_limited_total{namespace="team-a",reason="namespace_backlog"} 2`)
	assert.Contains(t, metrics, `runplane_ingress_limited_total{namespace="team-b",reason="pool_backlog"} 1`)
	assert.NotContains(t, metrics, `runplane_ingress_limited_total{namespace="team-b",reason="namespace_backlog"}`)

	// Draining team-a's backlog admits it again.
	e.tenantWorker("team-a", "p1", "w", 4, nil)
	e.tenantWorker("team-a", "p2", "w", 4, nil)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 202, e.do("POST", invocations("team-a", "p1"), map[string]any{"mode": "async"}).code)
	}, 10*time.Second, 100*time.Millisecond, "team-a never admitted again")
}

// concurrency counts the executions running at once, per key, and keeps
// the highest count seen.
type concurrency struct {
	mu       sync.Mutex
	now, max map[string]int
}

func (c *concurrency) handler(keys ...string) framework.HandlerFunc {
	return func(ctx context.Context, req framework.Request) (framework.Response, error) {
		c.mu.Lock()
		for _, k := range keys {
			c.now[k]++
			c.max[k] = max(c.max[k], c.now[k])
		}
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			for _, k := range keys {
				c.now[k]--
			}
			c.mu.Unlock()
		}()
		return sidecartest.Sleep(50*time.Millisecond)(ctx, req)
	}
}

// TestInFlightLimits: the executions of a pool with runplane.io/max-in-flight
// never exceed it, nor those of a namespace its limit, counted in the
// workers, although the workers have room for more; another namespace runs
// as many as its workers take.
func TestInFlightLimits(t *testing.T) {
	capped := pool.DefaultPolicy()
	capped.MaxInFlight = 2
	e := newEnv(t, func(c *queue.Config) {
		c.StaticPools = []string{"team-a/p1", "team-a/p2", "team-b/p1"}
		c.StaticPolicies = map[string]pool.Policy{"team-a/p1": capped}
		c.Limits = pool.Limits{NamespaceMaxInFlight: 3}
	})
	cc := &concurrency{now: map[string]int{}, max: map[string]int{}}
	for i := range 2 {
		e.tenantWorker("team-a", "p1", fmt.Sprint("w", i), 3, cc.handler("team-a/p1", "team-a"))
	}
	e.tenantWorker("team-a", "p2", "w", 3, cc.handler("team-a/p2", "team-a"))
	e.tenantWorker("team-b", "p1", "w", 3, cc.handler("team-b"))
	e.tenantWorker("team-b", "p1", "v", 3, cc.handler("team-b"))
	var ids []string
	post := func(ns, p string, n int) {
		for i := range n {
			id := fmt.Sprintf("%s-%s-%d", ns, p, i)
			r := e.do("POST", invocations(ns, p), map[string]any{"mode": "async", "invocationID": id})
			require.Equal(t, 202, r.code, "%s", r.raw)
			ids = append(ids, ns+"/"+id)
		}
	}
	post("team-a", "p1", 12)
	post("team-a", "p2", 6)
	post("team-b", "p1", 12)
	for _, k := range ids {
		ns, id, _ := strings.Cut(k, "/")
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			var rec messages.Record
			r := e.do("GET", "/v1/namespaces/"+ns+"/invocations/"+id, nil)
			assert.NoError(c, json.Unmarshal(r.raw, &rec))
			assert.Equal(c, messages.StateSucceeded, rec.State, k)
		}, 20*time.Second, 20*time.Millisecond)
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	assert.LessOrEqual(t, cc.max["team-a/p1"], 2, "pool team-a/p1 max-in-flight")
	assert.LessOrEqual(t, cc.max["team-a"], 3, "namespace team-a max-in-flight")
	assert.Equal(t, 3, cc.max["team-b"], "team-b runs up to the namespace limit, which is not team-a's")
	assert.Equal(t, 30, e.log.Total(), "each invocation ran once")
}
