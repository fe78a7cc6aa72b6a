package sshserver_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
)

// launched is runplane-ssh --launch running a user command, as the
// webhook wires it in front of an SSH Pod's main container.
type launched struct {
	cmd     *exec.Cmd
	out     *lockedBuffer // the user's stdout
	log     *lockedBuffer // stderr: the server's log and the user's stderr
	addrs   chan string   // each "listening" address, one per server start
	hostKey string
	done    chan struct{}
	state   *os.ProcessState
	// clientKey is listed in the server's authorized_keys.
	clientKey userKey
}

func launch(t *testing.T, env []string, command ...string) *launched {
	t.Helper()
	dir := t.TempDir()
	key := newUserKey(t, dir, "good")
	keys := filepath.Join(dir, "authorized_keys")
	writeAuthorized(t, keys, key)
	args := []string{"--launch", "--listen", "127.0.0.1:0", "--authorized-keys", keys, "--host-key", filepath.Join(dir, "host_key")}
	if os.Geteuid() == 0 {
		args = append(args, "--allow-root")
	}
	cmd := exec.Command(binPath, append(append(args, "--"), command...)...)
	cmd.Env = append(append(os.Environ(), "SHELL=/bin/sh"), env...)
	l := &launched{cmd: cmd, out: &lockedBuffer{}, log: &lockedBuffer{}, addrs: make(chan string, 8), hostKey: filepath.Join(dir, "host_key"), done: make(chan struct{})}
	cmd.Stdout = l.out
	cmd.Stderr = &lineWriter{line: func(line string) {
		fmt.Fprintln(l.log, line)
		var rec struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "listening" {
			l.addrs <- rec.Addr
		}
	}}
	// The user's process may hold the output pipes after a failed test;
	// Wait must not wait for it.
	cmd.WaitDelay = 2 * time.Second
	require.NoError(t, cmd.Start())
	go func() {
		_ = cmd.Wait()
		l.state = cmd.ProcessState
		close(l.done)
	}()
	t.Cleanup(func() {
		// The user's process and the server lead their own process
		// groups: end them with the launcher.
		for _, pid := range children(cmd.Process.Pid) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		<-l.done
		if t.Failed() {
			t.Logf("launcher stdout:\n%s\nstderr:\n%s", l.out.String(), l.log.String())
		}
	})
	l.clientKey = key
	return l
}

func (l *launched) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-l.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the launcher did not exit; stdout:\n%s\nstderr:\n%s", l.out.String(), l.log.String())
	}
	return l.state.ExitCode()
}

func (l *launched) waitOut(t *testing.T, s string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(l.out.String(), s) }, 20*time.Second, 10*time.Millisecond,
		"the user's command never printed %q; stdout:\n%s\nstderr:\n%s", s, l.out.String(), l.log.String())
}

func (l *launched) nextAddr(t *testing.T) string {
	t.Helper()
	select {
	case a := <-l.addrs:
		return a
	case <-time.After(20 * time.Second):
		t.Fatalf("the SSH server never listened; stderr:\n%s", l.log.String())
		return ""
	}
}

func (l *launched) dial(t *testing.T, addr string) *ssh.Client {
	t.Helper()
	data, err := os.ReadFile(l.hostKey)
	require.NoError(t, err)
	hk, err := ssh.ParsePrivateKey(data)
	require.NoError(t, err)
	c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{User: "dev", Auth: []ssh.AuthMethod{ssh.PublicKeys(l.clientKey.signer)},
		HostKeyCallback: ssh.FixedHostKey(hk.PublicKey()), Timeout: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// lineWriter calls line for each complete line written to it.
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	line func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.line(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}

// children are pid's child processes: /proc lists them per thread, and
// the Go runtime forks from any of them.
func children(pid int) []int {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, file := range files {
		data, _ := os.ReadFile(file)
		for _, f := range strings.Fields(string(data)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

func ppid(pid int) (int, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after ")" are fixed.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	return strconv.Atoi(fields[1])
}

// The container exits with the user's status: its exit code, 128+n for a
// signal n, 127 when the command cannot start.
func TestLaunchExitStatus(t *testing.T) {
	for _, tt := range []struct {
		name    string
		command []string
		want    int
		log     string
	}{
		{"exit code", []string{"sh", "-c", "echo out; exit 3"}, 3, ""},
		{"success", []string{"true"}, 0, ""},
		{"killed by a signal", []string{"sh", "-c", "kill -TERM $$"}, 128 + int(syscall.SIGTERM), ""},
		{"not found", []string{"no-such-command-here"}, 127, `no-such-command-here\": executable file not found`}, // in the JSON record
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := launch(t, nil, tt.command...)
			require.Equal(t, tt.want, l.wait(t))
			require.Contains(t, l.log.String(), tt.log)
		})
	}
}

// Signals sent to the container (the launcher) reach the user's process,
// which decides what they do; its status is the container's.
func TestLaunchForwardsSignals(t *testing.T) {
	l := launch(t, nil, "sh", "-c", `trap 'echo got-usr1' USR1; trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done`)
	l.waitOut(t, "ready")
	require.NoError(t, l.cmd.Process.Signal(syscall.SIGUSR1))
	l.waitOut(t, "got-usr1")
	require.NoError(t, l.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 7, l.wait(t))
	require.Contains(t, l.out.String(), "got-term")
}

// Orphans come to the launcher (a child subreaper, or PID 1) and it reaps
// them: a killed orphan does not stay a zombie.
func TestLaunchReapsOrphans(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "orphan")
	l := launch(t, nil, "sh", "-c", `(sleep 60 & echo $! > `+pidFile+`); echo ready; while :; do sleep 0.05; done`)
	l.waitOut(t, "ready")
	data, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	orphan, err := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, err)
	parent, err := ppid(orphan)
	require.NoError(t, err)
	require.Equal(t, l.cmd.Process.Pid, parent, "the orphan was not re-parented to the launcher")
	require.NoError(t, syscall.Kill(orphan, syscall.SIGKILL))
	require.Eventually(t, func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", orphan))
		return os.IsNotExist(err)
	}, 20*time.Second, 10*time.Millisecond, "the killed orphan %d stays a zombie: nobody reaps it", orphan)
}

// An SSH session runs beside the user's process with the container's
// environment; a dead SSH server is restarted while the user's process
// goes on, and the server stops when the user's process ends.
func TestLaunchServesSSH(t *testing.T) {
	stop := filepath.Join(t.TempDir(), "stop")
	l := launch(t, []string{"RUNPLANE_TEST_ENV=from-the-container"}, "sh", "-c", `echo ready; while [ ! -e `+stop+` ]; do sleep 0.05; done; echo stopping; exit 4`)
	addr := l.nextAddr(t)
	c := l.dial(t, addr)
	out, err := runGo(c, "echo $RUNPLANE_TEST_ENV")
	require.NoError(t, err)
	require.Equal(t, "from-the-container\n", out)

	// Kill the server: the launcher's child that is not the user's sh.
	var server int
	for _, pid := range children(l.cmd.Process.Pid) {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		require.NoError(t, err)
		if strings.TrimSpace(string(comm)) == "runplane-ssh" {
			server = pid
		}
	}
	require.NotZero(t, server, "no SSH server among the launcher's children")
	require.NoError(t, syscall.Kill(server, syscall.SIGKILL))
	c = l.dial(t, l.nextAddr(t))
	out, err = runGo(c, "echo again")
	require.NoError(t, err)
	require.Equal(t, "again\n", out)
	require.Contains(t, l.log.String(), "SSH server exited")
	require.NotContains(t, l.out.String(), "stopping", "the user's process noticed")

	// The user's process ends: the server stops, the container exits
	// with the user's status.
	require.NoError(t, os.WriteFile(stop, nil, 0o600))
	require.Equal(t, 4, l.wait(t))
	_, err = runGo(c, "true")
	require.Error(t, err, "a session still opens after the user's process ended")
}

// A command needs --launch, and --launch needs a command: both mistakes
// exit 2 saying so, before anything runs.
func TestLaunchUsage(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"command without --launch", []string{"--authorized-keys", "k", "--host-key", "h", "--", "sleep", "1"}, "a command to run needs --launch"},
		{"--launch without command", []string{"--launch", "--authorized-keys", "k", "--host-key", "h"}, "--launch needs the command to run after --"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := exec.Command(binPath, tt.args...).CombinedOutput()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "output: %s", out)
			require.Equal(t, 2, ee.ExitCode())
			require.Contains(t, string(out), tt.want)
		})
	}
}
