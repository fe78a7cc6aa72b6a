package kit

import (
	"context"
	"net/http"
	"time"
)

// HTTPOK says whether GET url answers 200 within 2 seconds (a readiness
// probe's question; any error is "not yet").
func HTTPOK(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
