package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/runplane/runplane/test/runplanebin"
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
func RepoRoot() (string, error) { return runplanebin.ModuleRoot() }
