package e2e

import "testing"

// TestMetricsOnlyForReaders: /metrics answers only a scraper the API server
// authenticates and RBAC allows get on /metrics (issue #30: it answered
// anyone).
func TestMetricsOnlyForReaders(t *testing.T) {
	h := setup(t)
	h.scrapers.Check(t, "https://"+h.addr+"/metrics", "runplane_extender_leader")
}
