package launcher

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The container's exit status is the user's: its code, or 128+n for a
// signal n. The process-level behaviour (signals, reaping, the server) is
// tested through the built binary in sidecar/sshserver (TestLaunch*).
func TestExitStatus(t *testing.T) {
	for _, tt := range []struct {
		name              string
		exited, signaled  bool
		code, sig, status int
	}{
		{"exit 0", true, false, 0, 0, 0},
		{"exit 3", true, false, 3, 0, 3},
		{"SIGTERM", false, true, 0, 15, 143},
		{"SIGKILL", false, true, 0, 9, 137},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.status, exitStatus(tt.exited, tt.code, tt.signaled, tt.sig))
		})
	}
}

func TestRunNeedsCommands(t *testing.T) {
	_, err := Run(Config{Server: []string{"/bin/true"}})
	require.ErrorContains(t, err, "no command to run")
	_, err = Run(Config{Command: []string{"true"}})
	require.ErrorContains(t, err, "no SSH server command")
}
