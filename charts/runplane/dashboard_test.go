package chart_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/test/cluster"
)

// dashboardPath is the Grafana dashboard the chart ships (templates/dashboard.yaml).
var dashboardPath = filepath.Join("dashboards", "runplane.json")

// dashboardCheck is the TypeScript tsc checks: the dashboard as an object
// literal of Grafana's own types (excess properties are errors there), each
// time series panel with the time series plugin's options and field config.
// Wire maps the schema's string enums to their values, which is what JSON
// holds (a TypeScript enum accepts only its members, not equal strings).
const dashboardCheck = `import type { Dashboard, Panel, RowPanel } from '@grafana/schema';
import type { Options, FieldConfig } from '@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen';

type Wire<T> = T extends string ? ` + "`${T}`" + ` : T extends number | boolean | null | undefined ? T :
  T extends Array<infer U> ? Array<Wire<U>> : T extends object ? { [K in keyof T]: Wire<T[K]> } : T;
type TimeSeriesPanel = Panel & { type: 'timeseries'; options: Wire<Options>; fieldConfig: { defaults: { custom?: Wire<FieldConfig> } } };
type Row = RowPanel & { type: 'row' };
type Runplane = Wire<Omit<Dashboard, 'panels'>> & { panels: Array<TimeSeriesPanel | Row> };

export const runplane: Runplane = `

// TestDashboardSchema type-checks the dashboard against Grafana's schema:
// @grafana/schema's TypeScript types, checked with tsc (both from the npm
// registry, pinned in test/grafana and installed once into a cache outside
// the repository by test/grafana/install.sh).
func TestDashboardSchema(t *testing.T) {
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	began := time.Now()
	install := exec.CommandContext(t.Context(), "bash", filepath.Join(root, "test", "grafana", "install.sh"))
	var stderr bytes.Buffer
	install.Stderr = &stderr
	out, err := install.Output()
	require.NoError(t, err, "test/grafana/install.sh (npm: bash hack/install-deps.sh):\n%s", stderr.String())
	modules := filepath.Join(strings.TrimSpace(string(out)), "node_modules")
	t.Logf("Grafana schema installed (or found cached) in %s", time.Since(began).Round(time.Millisecond))

	data, err := os.ReadFile(dashboardPath)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.Symlink(modules, filepath.Join(dir, "node_modules")))
	src := dashboardCheck + string(bytes.TrimSpace(data)) + ";\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard.ts"), []byte(src), 0o600))
	began = time.Now()
	tsc := exec.CommandContext(t.Context(), filepath.Join(modules, ".bin", "tsc"), "--noEmit", "--strict",
		"--target", "es2022", "--module", "esnext", "--moduleResolution", "bundler", "--skipLibCheck", "dashboard.ts")
	tsc.Dir = dir
	msg, err := tsc.CombinedOutput()
	require.NoError(t, err, "the dashboard does not type-check against @grafana/schema (line N of dashboard.ts is line N-%d of %s):\n%s",
		strings.Count(dashboardCheck, "\n"), dashboardPath, msg)
	t.Logf("tsc checked the dashboard in %s", time.Since(began).Round(time.Millisecond))
}

// TestDashboardPanels: every panel says what it shows (a description; a
// row has none in Grafana's schema, its title is its description), and
// panel ids are unique (Grafana keys a panel's state by its id).
func TestDashboardPanels(t *testing.T) {
	panels := dashboardPanels(t)
	ids := map[int]string{}
	for _, p := range panels {
		if p.Type == "row" {
			continue
		}
		assert.NotEmpty(t, strings.TrimSpace(p.Description), "panel %q (%s) has no description", p.Title, p.Type)
		if prev, ok := ids[p.ID]; ok {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
	}
	require.Greater(t, len(panels), 20, "too few panels to be reading the dashboard")
}

// panel is what the tests read of a dashboard panel.
type panel struct {
	ID          int    `json:"id"`
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Targets     []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// dashboardPanels reads the dashboard's panels.
func dashboardPanels(t *testing.T) []panel {
	t.Helper()
	data, err := os.ReadFile(dashboardPath)
	require.NoError(t, err)
	var dash struct {
		Panels []panel `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(data, &dash), "dashboard JSON")
	return dash.Panels
}
