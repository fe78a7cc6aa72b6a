package e2e

import (
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/webhook"
)

// TestWatchesOnlyThroughItsCaches: the webhook watches what it reads once
// per kind, restricted as RBAC grants (of ConfigMaps the catalog and the
// NATS CA by name; of the webhook configurations runplane's), all of it through its manager's
// caches since issue 32 (the catalog, the NATS CA and the webhook
// configurations had client-go informers of their own). Counted by the API
// server as the difference the webhook makes while it runs.
func TestWatchesOnlyThroughItsCaches(t *testing.T) {
	type watch struct{ resource, scope string }
	// A watch of one object by name (field selector metadata.name, what
	// RBAC's resourceNames allow) has scope "resource".
	want := map[watch]int{
		{"configmaps", "resource"}:                      2, // the catalog; the NATS CA (a second cache: a cache has one informer per kind)
		{"configmaps", "namespace"}:                     0,
		{"configmaps", "cluster"}:                       0,
		{"mutatingwebhookconfigurations", "resource"}:   1,
		{"validatingwebhookconfigurations", "resource"}: 1,
		{"mutatingwebhookconfigurations", "cluster"}:    0,
		{"validatingwebhookconfigurations", "cluster"}:  0,
		{"persistentvolumeclaims", "cluster"}:           1,
		{"priorityclasses", "cluster"}:                  1,
		{"namespaces", "cluster"}:                       1,
		{"secrets", "resource"}:                         0, // the TLS Secret is read and written, not watched
		{"resourceclaims", "cluster"}:                   0, // read from the API server, never cached
	}
	count := func(c require.TestingT) map[watch]int {
		out := map[watch]int{}
		for w := range want {
			n, err := env.Watches(t.Context(), w.resource, w.scope)
			require.NoError(c, err)
			out[w] = n
		}
		return out
	}
	// The previous test's webhook has stopped: wait until the API server
	// has closed its watches too.
	var before map[watch]int
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		a := count(c)
		time.Sleep(300 * time.Millisecond) // a settle window: no count of the stopped webhook's is known to wait for
		before = count(c)
		assert.True(c, maps.Equal(a, before), "the API server's watch counts still change: %v, then %v", a, before)
	}, 30*time.Second, 10*time.Millisecond)

	r := startWebhook(t, func(c *webhook.Config) { c.Injection.NATSServerName = "runplane-nats.runplane-system.svc" })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		now := count(c)
		got := map[watch]int{}
		for w := range want {
			got[w] = now[w] - before[w]
		}
		assert.Equal(c, want, got)
	}, 30*time.Second, 200*time.Millisecond)

	r.stop()
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, before, count(c)) }, 30*time.Second, 200*time.Millisecond,
		"the webhook's watches end with Run")
}
