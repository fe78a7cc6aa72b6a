package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is one supervised process that the harness starts, signals, kills
// and restarts. Unlike test/localworkers it never restarts on its own: a
// fault case decides when a killed process comes back.
type Proc struct {
	name string
	bin  string
	args []string
	env  []string
	log  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current cmd exited
}

// NewProc describes a process; Start runs it. env nil inherits the
// harness's env.
func NewProc(name, logPath, bin string, args, env []string) *Proc {
	return &Proc{name: name, bin: bin, args: args, env: env, log: logPath}
}

// Start runs the process (again, after it exited).
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !closed(p.done) {
		return fmt.Errorf("%s: already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("%s: log: %w", p.name, err)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group (signals reach only it) and a parent-death signal,
	// so nothing outlives a test binary that panics.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: start: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Running says whether the process has been started and not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !closed(p.done)
}

// PID is the current process's id (0 when not running).
func (p *Proc) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || closed(p.done) {
		return 0
	}
	return p.cmd.Process.Pid
}

// Signal sends sig to the running process.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || closed(p.done) {
		return fmt.Errorf("%s: not running", p.name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s: signal %v: %w", p.name, sig, err)
	}
	return nil
}

// Kill SIGKILLs the process and waits until it is gone.
func (p *Proc) Kill() { p.Stop(syscall.SIGKILL, 0) }

// Stop sends sig and waits up to grace for the exit, then SIGKILLs. A
// stopped (SIGSTOP) process is continued so it can act on sig.
func (p *Proc) Stop(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || closed(done) {
		return
	}
	_ = cmd.Process.Signal(sig)
	_ = cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-done:
		return
	case <-time.After(grace):
	}
	_ = cmd.Process.Kill()
	<-done
}

// RSS is the resident set size of the running process in bytes, from
// /proc/<pid>/status (VmRSS).
func (p *Proc) RSS() (int64, error) {
	pid := p.PID()
	if pid == 0 {
		return 0, errors.New(p.name + ": not running")
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p.name, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest) // "61234 kB"
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("%s: VmRSS %q: %w", p.name, rest, err)
				}
				return kb * 1024, nil
			}
		}
	}
	return 0, fmt.Errorf("%s: no VmRSS in /proc/%d/status", p.name, pid)
}
