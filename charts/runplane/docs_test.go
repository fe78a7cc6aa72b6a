package chart_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/test/cluster"
)

// TestValuesREADMECurrent: README.md is what helm-docs (pinned in
// hack/tools/go.mod) makes of README.md.gotmpl and the comments in
// values.yaml, so a value added or changed without `make chart-docs` fails.
func TestValuesREADMECurrent(t *testing.T) {
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	cmd := exec.CommandContext(t.Context(), "go", "tool", "-modfile="+filepath.Join(root, "hack", "tools", "go.mod"), "helm-docs",
		"--chart-search-root", ".", "--template-files", "README.md.gotmpl", "--dry-run", "--log-level", "error")
	out, err := cmd.Output()
	require.NoError(t, err, "helm-docs: %v", err)
	want, err := os.ReadFile("README.md")
	require.NoError(t, err)
	if string(want) != string(out) {
		t.Fatalf("README.md is stale: run make chart-docs\n%s", firstDiff(string(want), string(out)))
	}
}

// TestKubeScore: kube-score (pinned in hack/tools/go.mod) finds nothing
// critical in the default and full renders, beyond its opinionated checks
// the chart disagrees with: CPU limits (throttling control-plane components
// hurts more than it protects), ephemeral-storage limits and pull policy
// Always. Warnings are logged, not failed.
func TestKubeScore(t *testing.T) {
	needHelm(t)
	root, err := cluster.RepoRoot()
	require.NoError(t, err)
	for _, c := range renderCases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), "go", "tool", "-modfile="+filepath.Join(root, "hack", "tools", "go.mod"), "kube-score",
				"score", "--output-format", "ci", "--ignore-container-cpu-limit",
				"--ignore-test", "container-ephemeral-storage-request-and-limit,container-image-pull-policy", "-")
			cmd.Stdin = strings.NewReader(mustRender(t, c.args...))
			out, _ := cmd.Output() // exits 1 when anything is critical; the lines say what
			var critical []string
			for _, line := range strings.Split(string(out), "\n") {
				switch {
				case strings.HasPrefix(line, "[CRITICAL]"):
					critical = append(critical, line)
				case strings.HasPrefix(line, "[WARNING]"):
					t.Log(line)
				}
			}
			require.NotEmpty(t, out, "kube-score printed nothing")
			require.Empty(t, critical, "kube-score critical findings")
		})
	}
}
