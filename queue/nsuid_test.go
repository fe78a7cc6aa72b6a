package queue_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/callback"
)

// incarnations stands for the API server's namespace "default" and the
// queue's 10 s cache of its UID: cached is what a non-fresh read answers
// (possibly a deleted incarnation's), current what a fresh one does.
type incarnations struct {
	mu              sync.Mutex
	cached, current string
}

func (n *incarnations) UID(_ context.Context, ns string, fresh bool) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ns != "default" {
		return "", fmt.Errorf("namespace %q: %w", ns, callback.ErrNoNamespace)
	}
	if fresh {
		n.cached = n.current
	}
	return n.cached, nil
}

func (n *incarnations) set(cached, current string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cached, n.current = cached, current
}

// TestRecordOfPreviousNamespaceIncarnation: a namespace deleted and made
// again under its name (by another tenant, maybe) finds none of its
// predecessor's invocations: GET, stream and cancel answer 404 exactly as
// for an ID never used, and a re-post of the ID answers none of it. The
// rightful owner still reads its own while the queue's cache holds the old
// UID: a mismatch is read again fresh before it refuses.
func TestRecordOfPreviousNamespaceIncarnation(t *testing.T) {
	nss := &incarnations{cached: "uid-1", current: "uid-1"}
	e := newEnv(t, func(c *queue.Config) { c.Namespaces = nss })

	require.Equal(t, 202, e.invoke(map[string]any{"mode": "async", "invocationID": "old-owner"}).code)
	assert.Equal(t, "uid-1", e.stored("old-owner").NamespaceUID, "the stored Record is stamped (no answer shows it)")

	nss.set("uid-2", "uid-2") // deleted, made again
	missing := e.do("GET", "/v1/namespaces/default/invocations/never-was", nil)
	require.Equal(t, 404, missing.code)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/namespaces/default/invocations/old-owner"},
		{"GET", "/v1/namespaces/default/invocations/old-owner/stream"},
		{"POST", "/v1/namespaces/default/invocations/old-owner/cancel"},
	} {
		// Its status alone first: an answered stream would not end.
		req, err := http.NewRequest(c.method, e.base+c.path, nil)
		require.NoError(t, err)
		hr, err := httpClient().Do(req)
		require.NoError(t, err)
		require.NoError(t, hr.Body.Close())
		if !assert.Equal(t, 404, hr.StatusCode, "%s %s", c.method, c.path) {
			continue
		}
		r := e.do(c.method, c.path, nil)
		assert.Equal(t, strings.ReplaceAll(fmt.Sprint(missing.body["detail"]), "never-was", "old-owner"), fmt.Sprint(r.body["detail"]), "no hint it existed")
	}
	r := e.invoke(map[string]any{"mode": "async", "invocationID": "old-owner"})
	assert.Equal(t, 409, r.code, "%s", r.raw)
	assert.NotContains(t, string(r.raw), "uid-1")

	require.Equal(t, 202, e.invoke(map[string]any{"mode": "async", "invocationID": "new-owner"}).code)
	nss.set("uid-1", "uid-2") // the cache still holds the old incarnation's UID
	got := e.do("GET", "/v1/namespaces/default/invocations/new-owner", nil)
	assert.Equal(t, 200, got.code, "%s", got.raw)
	nss.set("uid-1", "uid-2")
	got = e.do("POST", "/v1/namespaces/default/invocations/new-owner/cancel", nil)
	assert.Equal(t, 200, got.code, "%s", got.raw)
}
