package cmdline

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runplane/runplane/test/runplanebin"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEveryBinaryFailsInJSON builds every binary of cmd/ and starts each
// with a bad flag and with a bad configuration: stderr is exactly one JSON
// record at ERROR naming the error (the line a log pipeline needs), and the
// exit code is 2 for a bad command line or configuration, 1 for a failed
// start.
func TestEveryBinaryFailsInJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every binary")
	}
	bin, err := runplanebin.Dir(t.Context(), t.TempDir())
	require.NoError(t, err)
	cases := map[string]struct {
		args []string
		code int
		err  string
	}{
		"framework-echo":      {[]string{"-sleep=soon"}, 1, `"soon" is not a duration`},
		"runplane-accessor":   {nil, 1, "--api-server is required outside a cluster"},
		"runplane-controller": {[]string{"-config=/nonexistent"}, 2, "ControllerConfiguration: open /nonexistent"},
		"runplane-copy":       {nil, 2, "--from and --to are required"},
		"runplane-extender":   {[]string{"-config=/nonexistent"}, 2, "ExtenderConfiguration: open /nonexistent"},
		"runplane-invoke":     {nil, 1, "-queue-url, -namespace and -pool are required"},
		"runplane-queue":      {[]string{"-config=/nonexistent"}, 2, "QueueConfiguration: open /nonexistent"},
		"runplane-sidecar":    {nil, 2, "RUNPLANE_POOL must be set"},
		"runplane-ssh":        {[]string{"-max-channels=0"}, 2, "--max-channels"},
		"runplane-webhook":    {[]string{"-config=/nonexistent"}, 2, "WebhookConfiguration: open /nonexistent"},
	}
	entries, err := os.ReadDir("../../cmd")
	require.NoError(t, err)
	for _, e := range entries {
		name := e.Name()
		c, ok := cases[name]
		require.True(t, ok, "cmd/%s: add its bad configuration here", name)
		t.Run(name, func(t *testing.T) {
			fatal(t, filepath.Join(bin, name), []string{"-no-such-flag"}, 2, "flag provided but not defined: -no-such-flag")
			fatal(t, filepath.Join(bin, name), c.args, c.code, c.err)
			if name != "runplane-ssh" { // its command to launch follows its flags
				// A path without -config, or a flag after an argument,
				// would leave it on its defaults.
				fatal(t, filepath.Join(bin, name), []string{"/etc/runplane/config.yaml", "-log-level=debug"}, 2, `unexpected arguments ["/etc/runplane/config.yaml" "-log-level=debug"]`)
			}
		})
	}
}

// fatal runs bin with args (no environment: outside any cluster) and
// requires its one JSON error record and exit code.
func fatal(t *testing.T, bin string, args []string, code int, want string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "%v %v: %v", bin, args, err)
	assert.Equal(t, code, exit.ExitCode(), "%v: exit code", args)
	assert.Empty(t, stdout.String())
	lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	require.Len(t, lines, 1, "%v: one line:\n%s", args, stderr.String())
	var rec struct {
		Level, Msg, Err string
		ExitCode        int
	}
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &rec), "%v: JSON: %s", args, lines[0])
	assert.Equal(t, "ERROR", rec.Level)
	assert.Equal(t, filepath.Base(bin)+" failed", rec.Msg)
	assert.Contains(t, rec.Err, want)
	assert.Equal(t, code, rec.ExitCode)
}
