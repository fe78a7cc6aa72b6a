package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/kit"
)

// promTarget is one component's /metrics as the chart's ServiceMonitor
// scrapes it: its Service (the job and service labels the Prometheus
// Operator gives the series) and the CA bundle of its Secret.
type promTarget struct {
	component, service, url string
	ca                      []byte
}

// serviceOf is the chart's metrics Service of each component
// (templates/servicemonitors.yaml).
var serviceOf = map[string]string{
	"controller": "runplane-controller-metrics",
	"extender":   "runplane-extender",
	"queue":      "runplane-queue-metrics",
	"webhook":    "runplane-webhook",
}

// dashboardVars are the dashboard's variables as the test sets them: the
// release namespace, and every tenant, pool and GPU spec (Grafana's All,
// the variables' allValue). Grafana's own interval variables get windows
// that hold several of the test's 1 s scrapes.
func dashboardVars(namespace string) *strings.Replacer {
	return strings.NewReplacer("$namespace", namespace, "$tenant", ".*", "$pool", ".*", "$spec", ".*",
		"$__rate_interval", "30s", "$__range", "5m")
}

// dashboard is what the test reads of the chart's dashboard.
type dashboard struct {
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(root, "charts", "runplane", "dashboards", "runplane.json"))
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(data, &d))
	return d
}

// chartRules renders the chart's PrometheusRule (as on a cluster serving
// its API) and returns its spec: a Prometheus rule file.
func chartRules(ctx context.Context, t *testing.T) []byte {
	t.Helper()
	bin, err := cluster.Binaries(ctx)
	require.NoError(t, err)
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	helm := exec.CommandContext(ctx, filepath.Join(bin, "helm"), "template", "runplane", filepath.Join(root, "charts", "runplane"),
		"--namespace", api.DefaultNamespace, "--kube-version", cluster.KubernetesVersion,
		"--api-versions", "monitoring.coreos.com/v1/PrometheusRule", "--show-only", "templates/prometheusrule.yaml")
	var stderr strings.Builder
	helm.Stderr = &stderr
	out, err := helm.Output()
	require.NoError(t, err, "helm template the PrometheusRule: %s", stderr.String())
	var rule struct {
		Kind string         `json:"kind"`
		Spec map[string]any `json:"spec"`
	}
	require.NoError(t, yaml.Unmarshal(out, &rule))
	require.Equal(t, "PrometheusRule", rule.Kind)
	spec, err := yaml.Marshal(rule.Spec)
	require.NoError(t, err)
	return spec
}

// startPrometheus runs Debian's Prometheus on the targets, scraping each
// every second as the chart's ServiceMonitors do (HTTPS verified with the
// component's CA, the reader's bearer token) and evaluating rules. It
// returns its URL once it is ready; the test's end stops it.
func startPrometheus(ctx context.Context, t *testing.T, targets []promTarget, token string, rules []byte) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	require.NoError(t, err, "prometheus is Debian's prometheus package: bash hack/install-deps.sh")
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "token"), []byte(token), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o600))
	var jobs []map[string]any
	for _, tg := range targets {
		caFile := filepath.Join(dir, tg.component+"-ca.crt")
		require.NoError(t, os.WriteFile(caFile, tg.ca, 0o600))
		u, err := neturl.Parse(tg.url)
		require.NoError(t, err)
		jobs = append(jobs, map[string]any{
			"job_name": tg.service, "scheme": "https", "metrics_path": u.Path,
			"authorization": map[string]any{"type": "Bearer", "credentials_file": filepath.Join(dir, "token")},
			// Verified: make dev's certificates name the loopback address it listens on.
			"tls_config": map[string]any{"ca_file": caFile},
			// The labels the Prometheus Operator gives a ServiceMonitor's
			// series; a series' own namespace label becomes exported_namespace.
			"static_configs": []map[string]any{{"targets": []string{u.Host}, "labels": map[string]string{
				"namespace": api.DefaultNamespace, "service": tg.service, "pod": tg.service + "-0"}}},
		})
	}
	cfg, err := yaml.Marshal(map[string]any{
		"global":         map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
		"rule_files":     []string{filepath.Join(dir, "rules.yaml")},
		"scrape_configs": jobs,
	})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), cfg, 0o600))
	port, err := kit.FreePort("127.0.0.1")
	require.NoError(t, err)
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	require.NoError(t, err)
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		_ = log.Close()
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			t.Logf("prometheus log:\n%s", out)
		}
	})
	require.Eventually(t, func() bool {
		resp, err := http.Get(url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, time.Minute, 100*time.Millisecond, "prometheus never ready")
	return url
}

// promGet decodes the data of a Prometheus HTTP API answer.
func promGet(ctx context.Context, base, path string, q neturl.Values, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("GET %s: %w: %s", path, err, body)
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s %s: %s", path, q.Encode(), env.Error)
	}
	return json.Unmarshal(env.Data, into)
}

// promVector is an instant query's result.
type promVector struct {
	ResultType string `json:"resultType"`
	Result     []struct {
		Metric map[string]string `json:"metric"`
	} `json:"result"`
}

// waitScraped is the barrier of the scrapes: every target scraped
// successfully at least once.
func waitScraped(ctx context.Context, t *testing.T, prom string, targets []promTarget) {
	t.Helper()
	var last string
	if !assert.Eventually(t, func() bool {
		var ts struct {
			ActiveTargets []struct {
				ScrapePool string `json:"scrapePool"`
				Health     string `json:"health"`
				LastError  string `json:"lastError"`
			} `json:"activeTargets"`
		}
		if err := promGet(ctx, prom, "/api/v1/targets", neturl.Values{"state": {"active"}}, &ts); err != nil {
			last = err.Error()
			return false
		}
		up := 0
		last = ""
		for _, a := range ts.ActiveTargets {
			if a.Health == "up" {
				up++
			} else {
				last += fmt.Sprintf("%s: %s %s; ", a.ScrapePool, a.Health, a.LastError)
			}
		}
		return up == len(targets)
	}, time.Minute, 200*time.Millisecond) {
		t.Fatalf("not every target scraped: %s", last)
	}
}

// labelValues is the query of a dashboard variable, label_values(selector,
// label), as a query that returns one series per value.
var labelValues = regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_]+)\)$`)

// checkDashboard runs a real Prometheus against make dev's components while
// invocations run and requires every expression of the chart's dashboard
// (variables substituted) and every variable's query to return data, and
// every rule of the chart's PrometheusRule to evaluate without error.
func checkDashboard(ctx context.Context, t *testing.T, targets []promTarget, token string, traffic func()) {
	began := time.Now()
	prom := startPrometheus(ctx, t, targets, token, chartRules(ctx, t))
	waitScraped(ctx, t, prom, targets)
	t.Logf("prometheus scraped every component after %s", time.Since(began).Round(100*time.Millisecond))
	traffic()

	d := readDashboard(t)
	vars := dashboardVars(api.DefaultNamespace)
	type query struct{ where, expr string }
	var queries []query
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		s, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(s)
		require.NotNil(t, m, "variable %s: query %q is not label_values(selector, label)", v.Name, s)
		queries = append(queries, query{"variable " + v.Name, fmt.Sprintf("count by (%s) (%s)", m[2], vars.Replace(m[1]))})
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			queries = append(queries, query{fmt.Sprintf("panel %q %s", p.Title, tg.RefID), vars.Replace(tg.Expr)})
		}
	}
	require.Greater(t, len(queries), 30, "too few dashboard queries to be reading it")
	// Every expression is polled until it returns data (a rate needs two
	// scrapes after its first sample, a counter vector its first event), up
	// to a deadline that then names those that never did.
	pending := queries
	lastErr := map[string]error{}
	deadline := time.Now().Add(45 * time.Second)
	for len(pending) > 0 && time.Now().Before(deadline) {
		var still []query
		for _, q := range pending {
			var got promVector
			err := promGet(ctx, prom, "/api/v1/query", neturl.Values{"query": {q.expr}}, &got)
			if err != nil || len(got.Result) == 0 {
				lastErr[q.expr] = err
				still = append(still, q)
			}
		}
		pending = still
		if len(pending) > 0 {
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	for _, q := range pending {
		t.Errorf("%s returns no data: %s (last error: %v)", q.where, q.expr, lastErr[q.expr])
	}
	t.Logf("%d dashboard queries returned data %s after prometheus started", len(queries), time.Since(began).Round(100*time.Millisecond))

	// The chart's alerting rules: every one evaluated, none with an error.
	var rules struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Name           string    `json:"name"`
				Health         string    `json:"health"`
				LastError      string    `json:"lastError"`
				LastEvaluation time.Time `json:"lastEvaluation"`
			} `json:"rules"`
		} `json:"groups"`
	}
	require.Eventually(t, func() bool {
		if err := promGet(ctx, prom, "/api/v1/rules", nil, &rules); err != nil || len(rules.Groups) == 0 {
			return false
		}
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				if r.LastEvaluation.IsZero() || r.LastEvaluation.Before(began) {
					return false
				}
			}
		}
		return true
	}, 30*time.Second, 250*time.Millisecond, "the chart's rules were never all evaluated")
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			assert.Equal(t, "ok", r.Health, "rule %s/%s: %s", g.Name, r.Name, r.LastError)
		}
	}
	require.Greater(t, n, 5, "too few rules loaded to be the chart's")
	t.Logf("%d rules of the chart evaluated without error", n)
}

// limitedPool creates a pool of the demo namespace that never gets a
// worker (its Pods select no node) and holds one queued invocation at most,
// so a second one is refused with 429 (runplane_ingress_limited_total).
func limitedPool(ctx context.Context, t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	const name = "held"
	pool := deployment(name, 0, map[string]string{api.LabelPool: name}, corev1.Container{Name: "framework", Image: "ghcr.io/runplane/framework-echo:dev"})
	pool.Annotations = map[string]string{api.AnnotationMinAvailable: "0", api.AnnotationMaxReplicas: "1", api.AnnotationMaxBacklog: "1"}
	pool.Spec.Template.Spec.NodeSelector = map[string]string{"runplane.io/no-such-node": "true"}
	_, err := client.AppsV1().Deployments(demoNamespace).Create(ctx, pool, metav1.CreateOptions{})
	require.NoError(t, err)
	return name
}

// invoke POSTs an invocation of pool in the demo namespace as token's
// caller and returns the status and body.
func invoke(ctx context.Context, t *testing.T, queueURL, token, pool, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, queueURL+"/v1/namespaces/"+demoNamespace+"/pools/"+pool+"/invocations", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(data)
}

// dashboardTraffic makes what the dashboard shows happen while Prometheus
// scrapes: sync, async and streamed invocations of the demo pool, a
// duplicate invocation ID, a caller without a token, and a 429 of a full
// pool backlog.
func dashboardTraffic(ctx context.Context, t *testing.T, client kubernetes.Interface, queueURL, token string) {
	t.Helper()
	code, body := invoke(ctx, t, queueURL, token, "echo", `{"mode":"sync","payload":{"prompt":"dashboard"},"timeoutSeconds":60}`)
	require.Equal(t, http.StatusOK, code, "sync: %s", body)
	code, body = invoke(ctx, t, queueURL, token, "echo", `{"stream":true,"payload":{"prompt":"stream"},"timeoutSeconds":60}`)
	require.Equal(t, http.StatusOK, code, "stream: %s", body)
	require.Contains(t, body, "event: result", "stream: %s", body)
	for range 2 {
		code, body = invoke(ctx, t, queueURL, token, "echo", `{"mode":"async","invocationID":"dashboard-duplicate","payload":{}}`)
		require.Less(t, code, 300, "async: %s", body)
	}
	code, body = invoke(ctx, t, queueURL, "", "echo", `{"mode":"async","payload":{}}`)
	require.Equal(t, http.StatusUnauthorized, code, "no token: %s", body)

	held := limitedPool(ctx, t, client)
	// The first is queued (once the ingress knows the pool), the next refused.
	require.Eventually(t, func() bool {
		code, body = invoke(ctx, t, queueURL, token, held, `{"mode":"async","payload":{}}`)
		return code == http.StatusAccepted
	}, 30*time.Second, 200*time.Millisecond, "the held pool never accepted an invocation: %d %s", code, body)
	// The very next is refused, although the activator may have just
	// learned the pool: its status says how far it took the invocation
	// stream in, and the ingress counts what it accepted beyond
	// (queue/README.md "Fairness").
	code, body = invoke(ctx, t, queueURL, token, held, `{"mode":"async","payload":{}}`)
	require.Equal(t, http.StatusTooManyRequests, code, "an invocation of a pool whose backlog holds one: %s", body)
}
