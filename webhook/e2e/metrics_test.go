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
// open on both.
func TestMetricsOnlyForReaders(t *testing.T) {
	r := startWebhook(t)
	r.scrapers.Check(t, "https://"+r.addr+"/metrics", "runplane_webhook_admissions_total")
	resp, err := http.Get(r.health + "/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "/metrics on the plain HTTP listener")
	assert.Equal(t, http.StatusOK, status(r.health+"/readyz"))
}
