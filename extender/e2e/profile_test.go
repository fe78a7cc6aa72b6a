package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// profileEnv names a directory: when set, the cluster benchmarks write CPU,
// mutex and block profiles of the extender and a CPU profile of the
// runplane-scheduler, taken while they measure
// (go tool pprof <dir>/<bench>-extender-cpu.pprof).
const profileEnv = "RUNPLANE_BENCH_PROFILE_DIR"

// profileDuring starts the profiles for the next d and returns a function
// that waits for them and writes them out.
func (h *harness) profileDuring(b *testing.B, name string, d time.Duration) func() {
	dir := os.Getenv(profileEnv)
	if dir == "" {
		return func() {}
	}
	cfg := env.RESTConfig()
	cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	if err != nil {
		b.Fatalf("admin client certificate: %v", err)
	}
	// The scheduler serves a self-signed certificate; the admin client
	// certificate authenticates the request (its delegated authn/authz).
	sched := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}}}} //nolint:gosec // a local test scheduler
	secs := int(d.Seconds())
	targets := map[string]struct {
		client *http.Client
		url    string
	}{
		"extender-cpu":   {http.DefaultClient, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", h.pprof, secs)},
		"scheduler-cpu":  {sched, fmt.Sprintf("https://127.0.0.1:%s/debug/pprof/profile?seconds=%d", h.schedulerPort, secs)},
		"extender-mutex": {http.DefaultClient, fmt.Sprintf("http://%s/debug/pprof/mutex?seconds=%d", h.pprof, secs)},
		"extender-block": {http.DefaultClient, fmt.Sprintf("http://%s/debug/pprof/block?seconds=%d", h.pprof, secs)},
	}
	var wg sync.WaitGroup
	for kind, t := range targets {
		wg.Go(func() {
			resp, err := t.client.Get(t.url)
			if err != nil {
				b.Logf("profile %s: %v", kind, err)
				return
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Logf("profile %s: %s %v %.200s", kind, resp.Status, err, data)
				return
			}
			path := filepath.Join(dir, name+"-"+kind+".pprof")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				b.Logf("profile %s: %v", kind, err)
				return
			}
			b.Logf("profile %s: %s", kind, path)
		})
	}
	return wg.Wait
}
