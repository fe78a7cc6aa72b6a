package kubetest_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestMetricsOnlyForReaders: the queue's /metrics is on a listener of its
// own and answers only a scraper the API server authenticates and RBAC
// allows get on /metrics; the ingress port, which every tenant calls,
// serves none (issue #30: it answered anyone with every namespace and pool
// name).
func TestMetricsOnlyForReaders(t *testing.T) {
	f := setup(t, nil, 0)
	f.scrapers.Check(t, f.metricsURL, "runplane_build_info")
	assert.Equal(t, http.StatusNotFound, f.get("/metrics"), "/metrics on the ingress port")
}
