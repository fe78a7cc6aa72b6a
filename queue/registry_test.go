package queue_test

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/test/scrape"
)

// TestOneRegistry: the binary (no Config.Registry) puts every series of the
// queue in controller-runtime's registry, the one the manager's series are
// in, and /metrics serves that registry and no other (issue 32: the queue
// served a registry of its own merged with controller-runtime's). When Run
// returns, the queue's own collectors leave it, so the next queue of the
// process starts (the second round).
func TestOneRegistry(t *testing.T) {
	ns := startNATS(t, t.TempDir(), -1)
	for round := range 2 {
		ctx, cancel := context.WithCancel(t.Context())
		addr, metricsAddr := make(chan string, 1), make(chan string, 1)
		done := make(chan error, 1)
		go func() {
			done <- queue.Run(ctx, queue.Config{NATS: queue.NATS{URL: ns.ClientURL()}, StaticPools: []string{testPool},
				Listen: "127.0.0.1:0", OnListen: func(a string) { addr <- a },
				MetricsListen: "127.0.0.1:0", OnMetricsListen: func(a string) { metricsAddr <- a },
				InsecureDisableCallerAuth: true, Logger: slog.New(slog.DiscardHandler)})
		}()
		var base, metricsURL string
		for base == "" || metricsURL == "" {
			select {
			case a := <-addr:
				base = "http://" + a
			case a := <-metricsAddr:
				metricsURL = "https://" + a + "/metrics"
			case err := <-done:
				require.FailNow(t, "queue.Run returned", "round %d: %v", round, err)
			case <-time.After(30 * time.Second):
				require.FailNow(t, "the queue did not listen within 30s")
			}
		}
		// An accepted invocation: the ingress's and the activator's counters
		// have series.
		r, err := http.Post(base+"/v1/namespaces/default/pools/"+testPool+"/invocations", "application/json", strings.NewReader(`{"mode":"async"}`))
		require.NoError(t, err)
		require.NoError(t, r.Body.Close())
		require.Equal(t, http.StatusAccepted, r.StatusCode)

		require.EventuallyWithT(t, func(c *assert.CollectT) {
			code, body, err := scrape.Get(metricsURL, "")
			require.NoError(c, err)
			require.Equal(c, http.StatusOK, code, body)
			served := families(body)
			for _, f := range []string{"runplane_build_info", "runplane_queue_store_up", "runplane_ingress_invocations_total",
				"runplane_activator_invocations_accepted_total", "go_goroutines"} {
				assert.Contains(c, served, f)
			}
			assert.Equal(c, gathered(c), served, "what /metrics serves is controller-runtime's registry")
		}, 10*time.Second, 50*time.Millisecond, "round %d", round)

		cancel()
		require.NoError(t, <-done)
		left := gathered(t)
		assert.Contains(t, left, "runplane_build_info", "the process's, which every component shares")
		for _, f := range left {
			assert.False(t, strings.HasPrefix(f, "runplane_queue_") || strings.HasPrefix(f, "runplane_ingress_") || strings.HasPrefix(f, "runplane_activator_"),
				"%s left registered by a stopped queue", f)
		}
	}
}

// families are the metric families of a scrape, sorted.
func families(body string) []string {
	var out []string
	for l := range strings.Lines(body) {
		if rest, ok := strings.CutPrefix(l, "# TYPE "); ok {
			out = append(out, strings.Fields(rest)[0])
		}
	}
	slices.Sort(out)
	return out
}

// gathered are the families in controller-runtime's registry, sorted.
func gathered(t require.TestingT) []string {
	mfs, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	var out []string
	for _, mf := range mfs {
		out = append(out, mf.GetName())
	}
	slices.Sort(out)
	return out
}
