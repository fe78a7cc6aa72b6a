// Package launcher runs a container's own command and runplane's SSH server
// side by side in one container, so SSH sessions share the container's
// GPUs, environment, mounts and cgroup limits. The launcher is the
// container's first process (PID 1 unless the Pod shares its process
// namespace): it starts the user's command as its child, forwards every
// signal a container receives to it, reaps every orphan (it is a child
// subreaper too), restarts the SSH server if it dies, and exits with the
// user's exit status once the user's command is gone.
//
// It is hand-written rather than taken from tini or dumb-init because it
// must supervise a second process (the SSH server) and ship inside the
// static runplane-ssh binary the webhook already delivers.
package launcher

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Forwarded are the signals passed on to the user's process: all a
// container runtime or a user sends to a container's main process.
// SIGCHLD is the launcher's own business, SIGKILL and SIGSTOP cannot be
// caught, and SIGURG is used by the Go runtime for preemption.
var Forwarded = forwarded

// Config is one launch.
type Config struct {
	// Command is the user's argv; Command[0] is looked up in $PATH as the
	// container runtime would.
	Command []string
	// Server is the SSH server's argv; Server[0] is an absolute path.
	Server []string
	// Logger receives the launcher's own lines (server restarts).
	Logger *slog.Logger
	// ServerStopGrace is how long the server may take to stop once the
	// user's process is gone before it is killed (DefaultServerStopGrace
	// if zero).
	ServerStopGrace time.Duration
}

// Defaults of Config.
const (
	DefaultServerStopGrace = 2 * time.Second
	// restartReset: a server that ran this long resets restartBackoff.
	restartReset = time.Minute
)

// restartBackoff is the wait between SSH server restarts: 1s doubling to 30s.
func restartBackoff() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt32}
}

// ExitStartFailed is the exit status when the user's command cannot be
// started (not found, not executable): the shell's 127 "command not
// found", where the container runtime would have failed the start itself.
const ExitStartFailed = 127

// Run starts the user's command and the SSH server and supervises both
// until the user's command exits; it returns the status the container
// must exit with: the command's exit code, or 128+n when a signal n
// ended it (what the runtime reports for a PID 1 killed by a signal). An
// error means the user's command never started; the status is then
// ExitStartFailed.
func Run(cfg Config) (int, error) {
	if len(cfg.Command) == 0 {
		return ExitStartFailed, errors.New("launcher: no command to run")
	}
	if len(cfg.Server) == 0 {
		return ExitStartFailed, errors.New("launcher: no SSH server command")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ServerStopGrace == 0 {
		cfg.ServerStopGrace = DefaultServerStopGrace
	}
	return run(cfg)
}

// exitStatus is the container's exit code for a wait status.
func exitStatus(exited bool, code int, signaled bool, sig int) int {
	switch {
	case exited:
		return code
	case signaled:
		return 128 + sig
	}
	return 255
}

func errorf(format string, args ...any) error { return fmt.Errorf("launcher: "+format, args...) }
