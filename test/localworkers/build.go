package localworkers

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
)

// BuildBinaries builds runplane-sidecar and framework-echo into dir (run it
// from inside the module, as go test and make do) and returns their paths,
// ready for Config.SidecarBinary and Config.FrameworkBinary.
func BuildBinaries(ctx context.Context, dir string) (sidecarBin, frameworkBin string, err error) {
	sidecarBin, frameworkBin = filepath.Join(dir, "runplane-sidecar"), filepath.Join(dir, "framework-echo")
	for pkg, out := range map[string]string{"runplane-sidecar": sidecarBin, "framework-echo": frameworkBin} {
		b, err := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/runplane/runplane/cmd/"+pkg).CombinedOutput()
		if err != nil {
			return "", "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
		}
	}
	return sidecarBin, frameworkBin, nil
}
