package launcher

import (
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
)

var forwarded = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM, unix.SIGUSR1, unix.SIGUSR2,
	unix.SIGWINCH, unix.SIGALRM, unix.SIGCONT, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU,
	unix.SIGPWR, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGVTALRM,
}

// supervisor is one Run's state; it lives on Run's goroutine only.
type supervisor struct {
	cfg        Config
	user       *os.Process
	userStatus unix.WaitStatus
	userDone   bool
	server     *os.Process // nil while not running
	serverFrom time.Time
	backoff    wait.Backoff
	restart    *time.Timer // pending restart, or nil
}

func run(cfg Config) (int, error) {
	// Orphans of the user's process and of SSH sessions come to the
	// launcher even when it is not PID 1 (a Pod sharing its process
	// namespace), so it reaps them as the container's PID 1 would.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		cfg.Logger.Warn("launcher: cannot become a child subreaper; orphans go to the namespace's PID 1", "err", err)
	}
	// Notify before starting anything: a signal that arrives while the
	// user's process starts is forwarded once it runs.
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, forwarded...)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, unix.SIGCHLD)
	defer signal.Stop(sigs)
	defer signal.Stop(chld)

	s := &supervisor{cfg: cfg, backoff: restartBackoff()}
	var err error
	if s.user, err = startUser(cfg.Command); err != nil {
		return ExitStartFailed, err
	}
	s.startServer()
	for !s.userDone {
		var restart <-chan time.Time
		if s.restart != nil {
			restart = s.restart.C
		}
		select {
		case sig := <-sigs:
			// The user's process alone gets it, as the runtime sends
			// to a container's main process alone.
			if err := s.user.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
				cfg.Logger.Warn("launcher: forwarding signal", "signal", sig.String(), "err", err)
			}
		case <-chld:
			s.reap()
		case <-restart:
			s.restart = nil
			s.startServer()
		}
	}
	s.stopServer(chld)
	ws := s.userStatus
	return exitStatus(ws.Exited(), ws.ExitStatus(), ws.Signaled(), int(ws.Signal())), nil
}

// startUser starts the user's command with the container's stdio and
// environment, in its own process group; with a terminal on stdin that
// group owns the terminal, so ^C and job control reach it as they reached
// the container's main process.
func startUser(argv []string) (*os.Process, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, errorf("starting %q: %w", argv[0], err)
	}
	attr := &syscall.SysProcAttr{Setpgid: true}
	if _, err := unix.IoctlGetTermios(0, unix.TCGETS); err == nil {
		attr.Foreground, attr.Ctty = true, 0
	}
	p, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env: os.Environ(), Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: attr,
	})
	if err != nil {
		return nil, errorf("starting %q: %w", argv[0], err)
	}
	return p, nil
}

// startServer starts the SSH server in its own process group (terminal
// signals are not its), stdin from /dev/null, logs on the container's
// stderr. A failure to start is retried like an exit.
func (s *supervisor) startServer() {
	devnull, err := os.Open(os.DevNull)
	if err == nil {
		defer devnull.Close()
		s.server, err = os.StartProcess(s.cfg.Server[0], s.cfg.Server, &os.ProcAttr{
			Env: os.Environ(), Files: []*os.File{devnull, os.Stderr, os.Stderr}, Sys: &syscall.SysProcAttr{Setpgid: true},
		})
	}
	if err != nil {
		s.server = nil
		s.cfg.Logger.Error("launcher: starting the SSH server", "err", err)
		s.scheduleRestart()
		return
	}
	s.serverFrom = time.Now()
}

func (s *supervisor) scheduleRestart() {
	if s.userDone || s.restart != nil {
		return
	}
	if s.server == nil && !s.serverFrom.IsZero() && time.Since(s.serverFrom) >= restartReset {
		s.backoff = restartBackoff()
	}
	s.cfg.Logger.Warn("launcher: SSH server not running; restarting", "in", s.backoff.Duration.String())
	s.restart = time.NewTimer(s.backoff.Step())
}

// reap collects every exited child: the user's process, the server, and
// any orphan re-parented here.
func (s *supervisor) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		switch {
		case pid == s.user.Pid:
			s.userStatus, s.userDone = ws, true
		case s.server != nil && pid == s.server.Pid:
			s.server = nil
			if !s.userDone {
				s.cfg.Logger.Error("launcher: SSH server exited", "status", exitStatus(ws.Exited(), ws.ExitStatus(), ws.Signaled(), int(ws.Signal())))
				s.scheduleRestart()
			}
		}
	}
}

// stopServer ends the SSH server once the user's process is gone: SIGTERM
// (it closes every connection), SIGKILL after the grace period.
func (s *supervisor) stopServer(chld <-chan os.Signal) {
	if s.restart != nil {
		s.restart.Stop()
		s.restart = nil
	}
	if s.server == nil {
		return
	}
	_ = s.server.Signal(unix.SIGTERM)
	grace := time.NewTimer(s.cfg.ServerStopGrace)
	defer grace.Stop()
	for s.server != nil {
		select {
		case <-chld:
			s.reap()
		case <-grace.C:
			_ = s.server.Signal(unix.SIGKILL)
			grace.Reset(s.cfg.ServerStopGrace)
		}
	}
}
