package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// profileEnv names a directory: when set, the cluster benchmarks write CPU,
// mutex and block profiles of the extender and CPU profiles of the
// runplane-scheduler and the API server, taken while they measure
// (go tool pprof <dir>/<bench>-extender-cpu.pprof).
const profileEnv = "RUNPLANE_BENCH_PROFILE_DIR"

// profileDuring starts the profiles for the next d and returns a function
// that waits for them and writes them out.
func (h *harness) profileDuring(b *testing.B, name string, d time.Duration) func() {
	dir := os.Getenv(profileEnv)
	if dir == "" {
		return func() {}
	}
	sched := schedulerClient(b)
	sched.Timeout = 0
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
	// The API server's through the test client (cluster-admin): most of
	// a burst's CPU is there.
	wg.Go(func() {
		data, err := env.Client().CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(secs)).DoRaw(b.Context())
		if err != nil {
			b.Logf("profile apiserver-cpu: %v", err)
			return
		}
		path := filepath.Join(dir, name+"-apiserver-cpu.pprof")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			b.Logf("profile apiserver-cpu: %v", err)
			return
		}
		b.Logf("profile apiserver-cpu: %s", path)
	})
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

// writeVerbs are the apiserver_request_total verbs that write (the
// metric names them as HTTP methods, APPLY for server-side apply).
var writeVerbs = []string{`verb="POST"`, `verb="PUT"`, `verb="PATCH"`, `verb="DELETE"`, `verb="APPLY"`, `verb="DELETECOLLECTION"`}

// cpuMetric is a Go process's CPU seconds in its /metrics.
const cpuMetric = "process_cpu_seconds_total"

// apiWrites is the API server's count of write (and GET and LIST)
// requests so far, by verb and resource (with subresource), e.g. "DELETE
// pods", and its CPU seconds
// (under cpuMetric), from its /metrics: what a burst costs the
// API server, which bounds bind throughput on a small machine.
func apiWrites(ctx context.Context) (map[string]float64, error) {
	body, err := env.Client().Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("apiserver /metrics: %w", err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if cpu, ok := strings.CutPrefix(line, cpuMetric+" "); ok {
			if v, err := strconv.ParseFloat(cpu, 64); err == nil {
				out[cpuMetric] = v
			}
			continue
		}
		write := slices.ContainsFunc(writeVerbs, func(v string) bool { return strings.Contains(line, v) })
		read := strings.Contains(line, `verb="GET"`) || strings.Contains(line, `verb="LIST"`)
		if !strings.HasPrefix(line, "apiserver_request_total{") || !write && !read {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[label(line, "verb")+" "+label(line, "resource")+label(line, "subresource")] += v
	}
	return out, nil
}

// label is a label's value in a metric line, "/value" for subresource.
func label(line, name string) string {
	_, rest, ok := strings.Cut(line, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	if name == "subresource" && v != "" {
		return "/" + v
	}
	return v
}

// writesPerPod reports, per bound Pod, the API writes between before and
// now: in total, and the largest by verb and resource in a log line (where
// a takeover's writes go: extender/README.md).
func writesPerPod(ctx context.Context, b *testing.B, before map[string]float64, pods int) {
	after, err := apiWrites(ctx)
	if err != nil || before == nil {
		b.Logf("API writes: %v", err)
		return
	}
	total := 0.0
	var parts []string
	if cpu, ok := before[cpuMetric]; ok {
		b.ReportMetric((after[cpuMetric]-cpu)*1000/float64(pods), "apiserver-cpu-ms/pod")
	}
	var reads []string
	for res, v := range after {
		if res == cpuMetric {
			continue
		}
		d := v - before[res]
		part := fmt.Sprintf("%s %.2f", res, d/float64(pods))
		switch {
		case strings.HasPrefix(res, "GET ") || strings.HasPrefix(res, "LIST "):
			if d/float64(pods) >= 0.01 {
				reads = append(reads, part)
			}
			continue
		case d/float64(pods) >= 0.1:
			parts = append(parts, part)
		}
		total += d
	}
	sort.Strings(parts)
	sort.Strings(reads)
	b.ReportMetric(total/float64(pods), "api-writes/pod")
	b.Logf("API writes per Pod: %s; reads (not counted): %s", strings.Join(parts, ", "), strings.Join(reads, ", "))
}

// schedulerClient reaches a test kube-scheduler's secure port: its
// certificate is self-signed, the admin client certificate authenticates
// (the scheduler delegates authn/authz to the API server).
func schedulerClient(b *testing.B) *http.Client {
	cfg := env.RESTConfig()
	cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	if err != nil {
		b.Fatalf("admin client certificate: %v", err)
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}}}} //nolint:gosec // a local test scheduler
}

// algorithmBuckets reads a scheduler's histogram of its scheduling
// algorithm (a cycle's filter and score of every node: in-tree plugins, and
// the extender's filter and prioritize calls for the runplane-scheduler):
// cumulative counts by upper bound.
func algorithmBuckets(b *testing.B, port string) map[float64]float64 {
	resp, err := schedulerClient(b).Get("https://127.0.0.1:" + port + "/metrics")
	if err != nil {
		b.Logf("scheduler metrics: %v", err)
		return nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Logf("scheduler metrics: %s %v", resp.Status, err)
		return nil
	}
	out := map[float64]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if cpu, ok := strings.CutPrefix(line, cpuMetric+" "); ok {
			// Kept under -2: the scheduler's CPU seconds so far.
			if v, err := strconv.ParseFloat(cpu, 64); err == nil {
				out[-2] = v
			}
			continue
		}
		if sum, ok := strings.CutPrefix(line, "scheduler_scheduling_algorithm_duration_seconds_sum "); ok {
			// Kept under the bound -1, which no bucket has: the seconds
			// the cycles took in all.
			if v, err := strconv.ParseFloat(sum, 64); err == nil {
				out[-1] += v
			}
			continue
		}
		if !strings.HasPrefix(line, "scheduler_scheduling_algorithm_duration_seconds_bucket{") {
			continue
		}
		le, err := strconv.ParseFloat(label(line, "le"), 64)
		if label(line, "le") == "+Inf" {
			le, err = math.Inf(1), nil
		}
		i := strings.LastIndexByte(line, ' ')
		v, err2 := strconv.ParseFloat(line[i+1:], 64)
		if err != nil || err2 != nil {
			continue
		}
		out[le] += v
	}
	return out
}

// reportAlgorithmP99 reports the p99 of the scheduling cycles between
// before and now (the upper bound of the bucket it falls in, in ms), and
// the scheduler's CPU per bound Pod: on a shared machine the steadiest
// figure of a cycle's cost.
func reportAlgorithmP99(b *testing.B, port string, before map[float64]float64, pods int) {
	after := algorithmBuckets(b, port)
	if after == nil {
		return
	}
	if _, ok := before[-2]; ok {
		b.ReportMetric((after[-2]-before[-2])*1000/float64(pods), "scheduler-cpu-ms/pod")
	}
	bounds := make([]float64, 0, len(after))
	for le := range after {
		if le >= 0 { // not -1 and -2
			bounds = append(bounds, le)
		}
	}
	sort.Float64s(bounds)
	total := after[math.Inf(1)] - before[math.Inf(1)]
	if total <= 0 {
		return
	}
	for _, le := range bounds {
		if after[le]-before[le] >= 0.99*total {
			b.ReportMetric(le*1000, "cycle-p99-ms")
			// The scheduler runs one cycle at a time: cycles times their
			// mean is the least a burst can take.
			spent := after[-1] - before[-1]
			b.Logf("scheduling algorithm: %.0f cycles, p99 <= %gms, mean %.1fms, %.1fs in all", total, le*1000, spent/total*1000, spent)
			return
		}
	}
}
