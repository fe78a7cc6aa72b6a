package e2e

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMetricsOnlyForReaders: /metrics is served on the HTTPS listener only,
// and only to a scraper the API server authenticates and RBAC allows get on
// /metrics (issue #30: the plain HTTP port answered anyone); the probes stay
// open on both. The one registry is controller-runtime's: its client-go
// series are there beside the webhook's (issue #32: a private registry had
// only the webhook's).
func TestMetricsOnlyForReaders(t *testing.T) {
	r := startWebhook(t)
	r.scrapers.Check(t, "https://"+r.addr+"/metrics", "runplane_webhook_admissions_total")
	m := r.metrics(t)
	for _, series := range []string{"rest_client_requests_total", "runplane_build_info", "go_goroutines", "process_cpu_seconds_total"} {
		assert.Contains(t, m, series)
	}
	resp, err := http.Get(r.health + "/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "/metrics on the plain HTTP listener")
	assert.Equal(t, http.StatusOK, status(r.health+"/readyz"))
}
