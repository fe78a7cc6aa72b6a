// Package runplanebin gives tests and the dev stack runplane's own
// binaries (./cmd/... and the pause binary) as the runplane image holds
// them: static, trimmed (images.BuildBinaries). make test builds them once
// for the whole run and names the directory in EnvDir; a package run on its
// own builds only what it asks for. Each suite linking its own copies cost
// the whole run minutes: TestContainerFlagsExist took 58 s and
// TestEveryBinaryFailsInJSON 32 s at load 12, most of it linking.
package runplanebin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/runplane/runplane/hack/images"
)

// EnvDir names a directory that already holds every runplane binary (make
// test sets it); when set, Dir builds nothing.
const EnvDir = "RUNPLANE_BIN_DIR"

// Dir returns a directory holding the named binaries (cmd/<name>, or
// "pause"; every one when none is named): EnvDir when it is set, else
// scratch, after building them there.
func Dir(ctx context.Context, scratch string, names ...string) (string, error) {
	if dir := os.Getenv(EnvDir); dir != "" {
		for _, n := range names {
			if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
				return "", fmt.Errorf("%s=%s has no %s: %w", EnvDir, dir, n, err)
			}
		}
		return dir, nil
	}
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	if err := images.BuildBinaries(ctx, root, scratch, names...); err != nil {
		return "", err
	}
	return scratch, nil
}

// moduleRoot is the directory of the go.mod go test runs under.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("runplanebin: not inside the runplane module")
	}
	return filepath.Dir(mod), nil
}
