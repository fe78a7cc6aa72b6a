package chart_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// withRules renders the PrometheusRule: the cluster serves its API.
var withRules = []string{"--api-versions", "monitoring.coreos.com/v1/PrometheusRule"}

// ruleGroups is the PrometheusRule's spec, which is a Prometheus rule file.
type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert string `json:"alert"`
			Expr  string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

func renderRules(t *testing.T, args ...string) (ruleGroups, []byte) {
	t.Helper()
	// The whole spec is written out (for, labels, annotations); the typed
	// view is for the checks here.
	var whole struct {
		Spec map[string]any `json:"spec"`
	}
	var typed struct {
		Spec ruleGroups `json:"spec"`
	}
	o := find(t, parse(t, mustRender(t, append(withRules, args...)...)), "PrometheusRule", "runplane")
	o.into(t, &whole)
	o.into(t, &typed)
	raw, err := yaml.Marshal(whole.Spec)
	require.NoError(t, err)
	return typed.Spec, raw
}

// TestAlertRules runs promtool (Debian's prometheus package,
// hack/install-deps.sh) on the rendered rules: `check rules` and the unit
// tests in testdata/alerts, and checks that those tests make every alert
// fire at least once and expect it silent at least once.
func TestAlertRules(t *testing.T) {
	needHelm(t)
	promtool, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool is Debian's prometheus package: bash hack/install-deps.sh")
	rules, raw := renderRules(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rules.yaml"), raw, 0o600))
	tests, err := os.ReadFile("testdata/alerts/rules_test.yaml")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o600))
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}

	var cases struct {
		Tests []struct {
			Name  string `json:"name"`
			Evals []struct {
				Alert string `json:"alertname"`
				Exp   []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	require.NoError(t, yaml.Unmarshal(tests, &cases))
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, c := range cases.Tests {
		for _, e := range c.Evals {
			if len(e.Exp) > 0 {
				fires[e.Alert] = true
			} else {
				silent[e.Alert] = true
			}
		}
	}
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts++
			assert.True(t, fires[r.Alert], "no test in testdata/alerts where %s fires", r.Alert)
			assert.True(t, silent[r.Alert], "no test in testdata/alerts where %s stays silent", r.Alert)
			assert.Contains(t, string(readme), "| `"+r.Alert+"`", "the README's alert table (README.md.gotmpl) lacks %s", r.Alert)
		}
	}
	assert.Equal(t, 13, alerts)
}

// TestAlertRulesTunableAndGated: the thresholds come from values, the
// NATS-down alert counts the bundled servers (or metrics.prometheusRule.natsServers
// with an external NATS, none when 0), and nothing renders without the
// Prometheus Operator's API or when turned off.
func TestAlertRulesTunableAndGated(t *testing.T) {
	needHelm(t)
	expr := func(rules ruleGroups, alert string) string {
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				if r.Alert == alert {
					return r.Expr
				}
			}
		}
		return ""
	}
	rules, _ := renderRules(t, "--set", "metrics.prometheusRule.thresholds.backlogAgeSeconds=60", "--set", "nats.bundled.replicas=1",
		"--set", "queue.stream.replicas=1")
	assert.True(t, strings.HasSuffix(expr(rules, "RunplaneQueueBacklogOld"), "> 60"), expr(rules, "RunplaneQueueBacklogOld"))
	assert.Equal(t, "max(runplane_nats_servers) < 1", expr(rules, "RunplaneNATSServerDown"))
	rules, _ = renderRules(t, "--values", "testdata/values-external.yaml")
	assert.Empty(t, expr(rules, "RunplaneNATSServerDown"), "an external NATS of unknown size")
	rules, _ = renderRules(t, "--values", "testdata/values-external.yaml", "--set", "metrics.prometheusRule.natsServers=5")
	assert.Equal(t, "max(runplane_nats_servers) < 5", expr(rules, "RunplaneNATSServerDown"))

	for _, args := range [][]string{nil, append([]string{"--set", "metrics.prometheusRule.enabled=false"}, withRules...)} {
		for _, o := range parse(t, mustRender(t, args...)) {
			assert.NotEqual(t, "PrometheusRule", o.kind(), "%v", args)
		}
	}
	_, err := render(t, append(withRules, "--set", "metrics.prometheusRule.thresholds.storeFullRatio=1.5")...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "/metrics/prometheusRule/thresholds/storeFullRatio")
}

// TestRulesReadExportedMetrics: every metric an alert reads is one a
// runplane component registers (a Name of a prometheus.*Opts or the name
// of a prometheus.NewDesc in the repository's Go code, tests left out),
// and a _bucket is read only of a histogram: a renamed metric breaks this
// test, not the alert, silently.
func TestRulesReadExportedMetrics(t *testing.T) {
	needHelm(t)
	exported := exportedMetrics(t, filepath.Join("..", ".."))
	require.Contains(t, exported, "runplane_activator_backlog", "the scan of the code found nothing")
	rules, _ := renderRules(t)
	names := regexp.MustCompile(`\brunplane_[a-z0-9_]*[a-z0-9]\b`)
	nameMatchers := regexp.MustCompile(`__name__=~"([^"]+)"`)
	alternation := regexp.MustCompile(`^([^()]*)\(([^()]+)\)([^()]*)$`)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			expr := r.Expr
			for _, m := range nameMatchers.FindAllStringSubmatch(expr, -1) {
				expr = strings.ReplaceAll(expr, m[0], "")
				parts := alternation.FindStringSubmatch(m[1])
				require.NotNil(t, parts, "%s: name matcher %q is not prefix(a|b)suffix", r.Alert, m[1])
				for _, alt := range strings.Split(parts[2], "|") {
					name := parts[1] + alt + parts[3]
					assert.Contains(t, exported, name, "%s reads %s (from %s), which nothing exports", r.Alert, name, m[1])
				}
			}
			for _, name := range names.FindAllString(expr, -1) {
				if strings.HasPrefix(expr[strings.Index(expr, name)+len(name):], "(") {
					continue // a label_replace regex group, not a metric
				}
				if base, ok := strings.CutSuffix(name, "_bucket"); ok {
					assert.Equal(t, "HistogramOpts", exported[base], "%s reads %s: %s is no histogram", r.Alert, name, base)
					continue
				}
				assert.Contains(t, exported, name, "%s reads %s, which nothing exports", r.Alert, name)
			}
		}
	}
}

// exportedMetrics maps each runplane_ metric name registered in the Go
// code under root to how it is declared (CounterOpts, GaugeOpts,
// HistogramOpts, ... or NewDesc).
func exportedMetrics(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	fset := token.NewFileSet()
	str := func(e ast.Expr) string {
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			s, err := strconv.Unquote(lit.Value)
			if err == nil && strings.HasPrefix(s, "runplane_") {
				return s
			}
		}
		return ""
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && slices.Contains([]string{".git", "node_modules", "testdata"}, d.Name()) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				sel, ok := n.Type.(*ast.SelectorExpr)
				if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
					return true
				}
				for _, e := range n.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" && str(kv.Value) != "" {
							out[str(kv.Value)] = sel.Sel.Name
						}
					}
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewDesc" && len(n.Args) > 0 && str(n.Args[0]) != "" {
					out[str(n.Args[0])] = "NewDesc"
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	return out
}
