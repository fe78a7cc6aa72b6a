package localworkers

import (
	"context"
	"path/filepath"

	"github.com/runplane/runplane/test/runplanebin"
)

// BuildBinaries returns runplane-sidecar and framework-echo, ready for
// Config.SidecarBinary and Config.FrameworkBinary: make test's build of
// them, or built into dir (run it from inside the module, as go test and
// make do).
func BuildBinaries(ctx context.Context, dir string) (sidecarBin, frameworkBin string, err error) {
	bin, err := runplanebin.Dir(ctx, dir, "runplane-sidecar", "framework-echo")
	if err != nil {
		return "", "", err
	}
	return filepath.Join(bin, "runplane-sidecar"), filepath.Join(bin, "framework-echo"), nil
}
