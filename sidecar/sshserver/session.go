package sshserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// Wire payloads of session requests (RFC 4254 section 6).
type (
	ptyRequestMsg struct {
		Term     string
		Columns  uint32
		Rows     uint32
		Width    uint32
		Height   uint32
		Modelist string
	}
	windowChangeMsg struct {
		Columns uint32
		Rows    uint32
		Width   uint32
		Height  uint32
	}
	envMsg struct {
		Name  string
		Value string
	}
	execMsg       struct{ Command string }
	subsystemMsg  struct{ Name string }
	signalMsg     struct{ Signal string }
	exitStatusMsg struct{ Status uint32 }
	exitSignalMsg struct {
		Signal     string
		CoreDumped bool
		Error      string
		Lang       string
	}
)

// maxEnv bounds the env requests a session keeps, so a client cannot grow
// the server's memory one request at a time.
const maxEnv = 64

// outputDrain bounds how long a finished command's PTY output is drained:
// a background child still holding the terminal must not hang the session.
const outputDrain = time.Second

// signals maps RFC 4254 signal names to Unix signals.
var signals = map[string]syscall.Signal{
	"ABRT": syscall.SIGABRT, "ALRM": syscall.SIGALRM, "FPE": syscall.SIGFPE, "HUP": syscall.SIGHUP,
	"ILL": syscall.SIGILL, "INT": syscall.SIGINT, "KILL": syscall.SIGKILL, "PIPE": syscall.SIGPIPE,
	"QUIT": syscall.SIGQUIT, "SEGV": syscall.SIGSEGV, "TERM": syscall.SIGTERM, "USR1": syscall.SIGUSR1,
	"USR2": syscall.SIGUSR2,
}

type session struct {
	c   *conn
	ch  ssh.Channel
	log *slog.Logger

	env []string
	pty *ptyRequestMsg

	mu      sync.Mutex
	started bool
	cmd     *exec.Cmd
	tty     *os.File
	done    chan struct{} // closed when the command or subsystem ends
}

func (c *conn) handleSession(ctx context.Context, nch ssh.NewChannel) {
	ch, reqs, err := nch.Accept()
	if err != nil {
		c.log.Warn("accept session", "err", err)
		return
	}
	s := &session{c: c, ch: ch, log: c.log, done: make(chan struct{})}
	defer ch.Close()
	for req := range reqs {
		ok, run := s.handleRequest(ctx, req)
		if req.WantReply {
			_ = req.Reply(ok, nil)
		}
		// The command's I/O and its exit (which closes the channel) start
		// only after the reply, so a fast command cannot close the channel
		// before the client has heard that it started.
		if run != nil {
			go run()
		}
	}
	// The client closed the channel: hang up whatever still runs.
	s.hangup()
}

func (s *session) handleRequest(ctx context.Context, req *ssh.Request) (bool, func()) {
	switch req.Type {
	case "shell":
		return s.start(ctx, "shell", "")
	case "exec":
		var m execMsg
		if ssh.Unmarshal(req.Payload, &m) != nil {
			return false, nil
		}
		return s.start(ctx, "exec", m.Command)
	case "subsystem":
		var m subsystemMsg
		if ssh.Unmarshal(req.Payload, &m) != nil || m.Name != "sftp" {
			return false, nil
		}
		return s.start(ctx, "sftp", "")
	default:
		return s.handleSetting(req), nil
	}
}

// handleSetting answers the requests that configure or steer a session.
func (s *session) handleSetting(req *ssh.Request) bool {
	switch req.Type {
	case "env":
		var m envMsg
		if ssh.Unmarshal(req.Payload, &m) != nil || !acceptEnv(m.Name) || len(s.env) >= maxEnv {
			return false
		}
		s.env = append(s.env, m.Name+"="+m.Value)
		return true
	case "pty-req":
		var m ptyRequestMsg
		if ssh.Unmarshal(req.Payload, &m) != nil {
			return false
		}
		if !s.c.grants.pty {
			s.c.srv.metrics.optionDenials.WithLabelValues("pty").Inc()
			s.log.Info("pty refused", "reason", "authorized_keys no-pty or restrict")
			return false
		}
		s.pty = &m
		return true
	case "window-change":
		var m windowChangeMsg
		if ssh.Unmarshal(req.Payload, &m) != nil {
			return false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.pty != nil {
			s.pty.Columns, s.pty.Rows, s.pty.Width, s.pty.Height = m.Columns, m.Rows, m.Width, m.Height
		}
		if s.tty != nil {
			_ = pty.Setsize(s.tty, winsize(m.Columns, m.Rows, m.Width, m.Height))
		}
		return true
	case "signal":
		var m signalMsg
		if ssh.Unmarshal(req.Payload, &m) != nil {
			return false
		}
		sig, ok := signals[m.Signal]
		if !ok {
			return false
		}
		return s.signal(sig) == nil
	default:
		return false
	}
}

// acceptEnv mirrors OpenSSH's usual AcceptEnv LANG LC_*: locale only, so a
// client cannot inject LD_PRELOAD or PATH into the sidecar's processes.
func acceptEnv(name string) bool {
	return name == "LANG" || strings.HasPrefix(name, "LC_")
}

func winsize(cols, rows, w, h uint32) *pty.Winsize {
	return &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows), X: uint16(w), Y: uint16(h)}
}

// sftpOnlyMessage is what OpenSSH prints when a key forced to internal-sftp
// asks for a shell or a command.
const sftpOnlyMessage = "This service allows sftp connections only.\n"

// start launches the shell, command or SFTP server and returns the function
// that serves its I/O until it ends. A key's forced command (command= in
// authorized_keys) replaces all three; the client's command is passed in
// SSH_ORIGINAL_COMMAND ("internal-sftp" for the sftp subsystem), as sshd
// does.
func (s *session) start(_ context.Context, kind, command string) (bool, func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return false, nil
	}
	m := s.c.srv.metrics
	forced := s.c.grants.forceCommand
	log := s.log.With("session", kind, "pty", s.pty != nil, "forcedCommand", forced != nil)
	var extraEnv []string
	if forced != nil {
		switch {
		case *forced == internalSFTP && kind == "sftp":
			// The forced command is the built-in SFTP server: serve it.
		case *forced == internalSFTP:
			s.started = true
			m.sessions.WithLabelValues(kind).Inc()
			log.Info("session refused", "reason", "key forced to internal-sftp")
			return true, func() {
				defer close(s.done)
				_, _ = io.WriteString(s.ch.Stderr(), sftpOnlyMessage)
				s.exit(exitStatusMsg{Status: 1}, nil)
			}
		default:
			switch kind {
			case "exec":
				extraEnv = []string{"SSH_ORIGINAL_COMMAND=" + command}
			case "sftp":
				extraEnv = []string{"SSH_ORIGINAL_COMMAND=" + internalSFTPOrigin}
			}
			// Even command="" runs "$SHELL -c ''", as in sshd: never a
			// login shell.
			command = *forced
		}
	}
	if kind == "sftp" && (forced == nil || *forced == internalSFTP) {
		srv, err := sftp.NewServer(s.ch, sftp.WithServerWorkingDirectory(homeDir()))
		if err != nil {
			log.Error("start sftp", "err", err)
			return false, nil
		}
		s.started = true
		m.sessions.WithLabelValues(kind).Inc()
		m.activeSessions.Inc()
		log.Info("session started")
		return true, func() {
			defer close(s.done)
			defer m.activeSessions.Dec()
			start := time.Now()
			// No srv.Close() here: it closes the channel, and scp (unlike
			// sftp) fails without the exit status that exit() sends first.
			err := srv.Serve()
			status := uint32(0)
			if err != nil && !errors.Is(err, io.EOF) {
				status = 1
				log.Warn("sftp ended", "err", err)
			}
			s.exit(exitStatusMsg{Status: status}, nil)
			log.Info("session ended", "status", status, "duration", time.Since(start).Round(time.Millisecond).String())
		}
	}

	cmd := s.command(command, forced == nil && command == "", extraEnv...)
	var err error
	if s.pty != nil {
		s.tty, err = pty.StartWithSize(cmd, winsize(s.pty.Columns, s.pty.Rows, s.pty.Width, s.pty.Height))
	} else {
		err = s.startPipes(cmd)
	}
	if err != nil {
		log.Error("start command", "err", err)
		return false, nil
	}
	s.started, s.cmd = true, cmd
	m.sessions.WithLabelValues(kind).Inc()
	m.activeSessions.Inc()
	// The command text is not logged: it may carry tokens.
	log.Info("session started", "pid", cmd.Process.Pid)
	return true, func() {
		defer close(s.done)
		defer m.activeSessions.Dec()
		start := time.Now()
		status, sig := s.wait()
		s.exit(status, sig)
		if sig != nil {
			log.Info("session ended", "signal", sig.Signal, "duration", time.Since(start).Round(time.Millisecond).String())
		} else {
			log.Info("session ended", "status", status.Status, "duration", time.Since(start).Round(time.Millisecond).String())
		}
	}
}

func homeDir() string {
	if h, err := os.UserHomeDir(); err == nil {
		if st, err := os.Stat(h); err == nil && st.IsDir() {
			return h
		}
	}
	return "/"
}

// command builds the shell invocation the way sshd does: a login shell for
// "shell" (login), "$SHELL -c command" otherwise. extraEnv is set after
// everything else, so a client cannot override it.
func (s *session) command(command string, login bool, extraEnv ...string) *exec.Cmd {
	shell := s.c.srv.cfg.Shell
	cmd := &exec.Cmd{Path: shell, Dir: homeDir()}
	if login {
		cmd.Args = []string{"-" + filepath.Base(shell)}
	} else {
		cmd.Args = []string{shell, "-c", command}
	}
	env := os.Environ()
	if os.Getenv("HOME") == "" {
		env = append(env, "HOME="+cmd.Dir)
	}
	if h, p, err := net.SplitHostPort(s.c.sc.RemoteAddr().String()); err == nil {
		lh, lp, _ := net.SplitHostPort(s.c.sc.LocalAddr().String())
		env = append(env, "SSH_CLIENT="+h+" "+p+" "+lp, "SSH_CONNECTION="+h+" "+p+" "+lh+" "+lp)
	}
	if s.pty != nil && s.pty.Term != "" {
		env = append(env, "TERM="+s.pty.Term)
	}
	cmd.Env = append(append(env, s.env...), extraEnv...)
	return cmd
}

// startPipes starts cmd without a terminal. Stdin is copied by our own
// goroutine (not exec's) so Wait returns when the command exits even if the
// client keeps its stdin open.
func (s *session) startPipes(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout = s.ch
	cmd.Stderr = s.ch.Stderr()
	// A background child holding stdout must not keep the session open.
	cmd.WaitDelay = outputDrain
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() {
		_, _ = io.Copy(stdin, s.ch)
		stdin.Close()
	}()
	return nil
}

func (s *session) wait() (exitStatusMsg, *exitSignalMsg) {
	var outDone chan struct{}
	if s.tty != nil {
		outDone = make(chan struct{})
		go func() { _, _ = io.Copy(s.tty, s.ch) }()
		go func() {
			defer close(outDone)
			_, _ = io.Copy(s.ch, s.tty)
		}()
	}
	err := s.cmd.Wait()
	if outDone != nil {
		select {
		case <-outDone:
		case <-time.After(outputDrain):
		}
		s.mu.Lock()
		s.tty.Close()
		s.mu.Unlock()
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return exitStatusMsg{Status: 255}, nil
	}
	ps := s.cmd.ProcessState
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		name := "KILL"
		for n, sig := range signals {
			if sig == ws.Signal() {
				name = n
			}
		}
		return exitStatusMsg{}, &exitSignalMsg{Signal: name, CoreDumped: ws.CoreDump()}
	}
	return exitStatusMsg{Status: uint32(ps.ExitCode())}, nil
}

// exit reports how the session ended and closes the channel.
func (s *session) exit(status exitStatusMsg, sig *exitSignalMsg) {
	if sig != nil {
		_, _ = s.ch.SendRequest("exit-signal", false, ssh.Marshal(sig))
	} else {
		_, _ = s.ch.SendRequest("exit-status", false, ssh.Marshal(&status))
	}
	_ = s.ch.CloseWrite()
	_ = s.ch.Close()
}

func (s *session) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("no process")
	}
	// Negative pid: the whole process group, like a terminal would.
	return syscall.Kill(-s.cmd.Process.Pid, sig)
}

// hangup runs when the client's channel is gone: SIGHUP the command's
// process group, then SIGKILL it if it lingers.
func (s *session) hangup() {
	s.mu.Lock()
	started, cmd := s.started, s.cmd
	s.mu.Unlock()
	if !started {
		return
	}
	if cmd == nil { // sftp: closing the channel ends Serve
		<-s.done
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.signal(syscall.SIGHUP)
	select {
	case <-s.done:
	case <-time.After(2 * time.Second):
		_ = s.signal(syscall.SIGKILL)
		<-s.done
	}
}
