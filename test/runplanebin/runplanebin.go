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
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/runplane/runplane/hack/images"
)

// EnvDir names a directory that already holds every runplane binary (make
// test sets it); when set, Dir builds nothing.
const EnvDir = "RUNPLANE_BIN_DIR"

// Dir returns a directory holding the named binaries (cmd/<name>, or
// "pause"; every one when none is named): EnvDir when it is set, else
// scratch, after building them there.
func Dir(ctx context.Context, scratch string, names ...string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	if dir := os.Getenv(EnvDir); dir != "" {
		return dir, fresh(root, dir, names)
	}
	if err := images.BuildBinaries(ctx, root, scratch, names...); err != nil {
		return "", err
	}
	return scratch, nil
}

// fresh checks that dir holds the named binaries (every one when none is
// named) and that no Go source, go.mod or go.sum of the module at root is
// newer than any of them: a directory exported once and kept would run the
// code as it was then, and pass tests of code that changed since.
func fresh(root, dir string, names []string) error {
	if len(names) == 0 {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("%s=%s: %w", EnvDir, dir, err)
		}
		for _, e := range entries {
			names = append(names, e.Name())
		}
	}
	var built time.Time
	for _, n := range names {
		fi, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			return fmt.Errorf("%s=%s has no %s: %w", EnvDir, dir, n, err)
		}
		if built.IsZero() || fi.ModTime().Before(built) {
			built = fi.ModTime()
		}
	}
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if name := d.Name(); !strings.HasSuffix(name, ".go") && name != "go.mod" && name != "go.sum" {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.ModTime().After(built) {
			return fmt.Errorf("%s=%s was built before %s changed: unset it (each package then builds what it runs) or build it again (go run ./hack/images/cmd/runplane-images -only binaries -bin %s)",
				EnvDir, dir, path, dir)
		}
		return nil
	})
}

// ModuleRoot finds the runplane module's root by walking up from the
// working directory (go test runs in the package's directory).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the module root: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module github.com/runplane/runplane\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding the module root: no runplane go.mod above the working directory")
		}
		dir = parent
	}
}
