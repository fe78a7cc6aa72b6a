package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// EnvBinDir names a directory that already holds the testbin binaries; when
// it is set, Binaries does not build anything.
const EnvBinDir = "RUNPLANE_TESTBIN_DIR"

// Binaries returns the directory holding kube-apiserver, etcd, kwok and the
// other testbin binaries. Unless EnvBinDir is set it runs
// test/testbin/build.sh, which builds them once into a cache outside the
// repository (about 10 minutes on 2 cores the first time) and afterwards
// only prints the cached directory.
func Binaries(ctx context.Context) (string, error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "test", "testbin", "build.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building testbin binaries: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// RepoRoot finds the runplane module root by walking up from the working
// directory (go test runs in the package directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding repo root: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module github.com/runplane/runplane\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("finding repo root: no runplane go.mod above the working directory")
		}
		dir = parent
	}
}
