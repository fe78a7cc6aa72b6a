package chart_test

import (
	"os"
	"os/exec"
	"path/filepath"
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
