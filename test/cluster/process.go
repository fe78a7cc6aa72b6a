package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/runplane/runplane/test/kit"
)

// Process is one control-plane process, its output in a log file.
type Process struct {
	Name    string
	LogPath string

	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	stop    sync.Once
}

// startProcess starts bin with args, logging to dir/<name>.log. The process
// gets its own process group (so Stop reaches its children) and is killed by
// the kernel if the test binary dies first.
func startProcess(dir, name, bin string, args ...string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the process group, then SIGKILL after a grace period.
func (p *Process) Stop() {
	p.stop.Do(func() {
		pgid := -p.cmd.Process.Pid
		_ = syscall.Kill(pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(pgid, syscall.SIGKILL)
			<-p.done
		}
	})
}

// Kill ends the process group at once with SIGKILL, as a crash would.
func (p *Process) Kill() {
	p.stop.Do(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	})
}

// Tail returns the last n lines of the process log.
func (p *Process) Tail(n int) string { return tailFile(p.LogPath, n) }

// tailFile returns the last n lines of file path.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", path, err)
	}
	return kit.Tail(string(data), n)
}

// waitFor polls check until it succeeds, the process exits or ctx ends.
func waitFor(ctx context.Context, p *Process, what string, check func() error) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		if exited, err := p.Exited(); exited {
			if err == nil { // a clean exit is still an exit before the wait was met
				err = errors.New("exit status 0")
			}
			return false, fmt.Errorf("%s exited while waiting for %s (%w); log tail:\n%s", p.Name, what, err, p.Tail(30))
		}
		last = check()
		return last == nil, nil
	})
	if err != nil && ctx.Err() != nil {
		if last == nil { // ctx ended before the first check
			last = errors.New("not checked")
		}
		return fmt.Errorf("waiting for %s: %w (last: %w)", what, ctx.Err(), last)
	}
	return err
}

// Pid is the process ID (also its process group ID).
func (p *Process) Pid() int { return p.cmd.Process.Pid }
