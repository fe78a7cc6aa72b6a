package controllers_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/controllers"
	"github.com/runplane/runplane/test/kit"
	"github.com/runplane/runplane/test/scrape"
)

// TestMetricsOnlyForReaders: the manager's /metrics is HTTPS and answers
// only a scraper the API server authenticates and RBAC allows get on
// /metrics (issue #30: it answered anyone).
func TestMetricsOnlyForReaders(t *testing.T) {
	scrapers, err := scrape.New(t.Context(), env)
	require.NoError(t, err)
	port, err := kit.FreePort("127.0.0.1")
	require.NoError(t, err)
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/metrics"
	startManager(t, func(c *controllers.Config) { c.Metrics.BindAddress = "127.0.0.1:" + strconv.Itoa(port) })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, _, err := scrape.Get(url, "")
		assert.NoError(c, err)
	}, 30*time.Second, 100*time.Millisecond, "the metrics listener")
	scrapers.Check(t, url, "controller_runtime_")
}
