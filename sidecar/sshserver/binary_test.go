package sshserver_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
)

// fixture is a running server with one listed key ("good") and one key
// that is not listed ("stranger").
type fixture struct {
	srv            *server
	good, stranger userKey
}

func newFixture(t *testing.T, extra ...string) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{good: newUserKey(t, dir, "good"), stranger: newUserKey(t, dir, "stranger")}
	keys := filepath.Join(dir, "authorized_keys")
	writeAuthorized(t, keys, f.good)
	f.srv = startServer(t, dir, keys, extra...)
	return f
}

func runGo(c *ssh.Client, command string) (string, error) {
	sess, err := c.NewSession()
	if err != nil {
		return "", err
	}
	defer sess.Close()
	out, err := sess.CombinedOutput(command)
	return string(out), err
}

func TestGoClientAuth(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name   string
		user   string
		auth   ssh.AuthMethod
		wantOK bool
	}{
		{"listed key", "dev", ssh.PublicKeys(f.good.signer), true},
		{"listed key, any user name", "someone-else", ssh.PublicKeys(f.good.signer), true},
		{"unknown key", "dev", ssh.PublicKeys(f.stranger.signer), false},
		{"password", "dev", ssh.Password("hunter2"), false},
		{"keyboard-interactive", "dev", ssh.KeyboardInteractive(func(string, string, []string, []bool) ([]string, error) {
			return []string{"hunter2"}, nil
		}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := f.srv.dial(tt.user, tt.auth)
			if !tt.wantOK {
				if err == nil {
					c.Close()
					t.Fatal("login succeeded, want refused")
				}
				require.Contains(t, err.Error(), "unable to authenticate", "err = %v, want an authentication failure", err)
				return
			}
			require.NoError(t, err)
			defer c.Close()
			out, err := runGo(c, "echo hello from $0")
			require.NoError(t, err, "exec")
			require.Contains(t, out, "hello from")
		})
	}
}

func TestOpenSSHAuth(t *testing.T) {
	needOpenSSH(t, "ssh")
	f := newFixture(t)
	tests := []struct {
		name     string
		identity string
		opts     []string
		wantOut  string
		wantErr  string
	}{
		{"listed key", f.good.file, nil, "ok", ""},
		{"unknown key", f.stranger.file, nil, "", "Permission denied (publickey)"},
		// The server must not even offer password or keyboard-interactive.
		{"password only", f.good.file, []string{"-o", "PreferredAuthentications=password,keyboard-interactive"}, "",
			"Permission denied (publickey)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := f.srv.sshCmd(t, tt.identity, append(tt.opts, "echo", "ok")...)
			// -o options must precede the host: sshCmd puts them first, but
			// per-test ones are inserted before the destination here.
			if tt.opts != nil {
				cmd = exec.Command("ssh", append(append(opensshOpts(t, f.srv.dir, f.srv.addr, f.srv.hostKey, tt.identity), tt.opts...),
					"-p", f.srv.port(), "dev@127.0.0.1", "echo", "ok")...)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if tt.wantErr != "" {
				require.Error(t, err)
				require.Contains(t, stderr.String(), tt.wantErr)
				return
			}
			require.NoError(t, err, "stderr %q", stderr.String())
			require.Equal(t, tt.wantOut, strings.TrimSpace(string(out)))
		})
	}
}

func TestOpenSSHCommands(t *testing.T) {
	needOpenSSH(t, "ssh")
	f := newFixture(t)
	tests := []struct {
		name     string
		args     []string
		stdin    string
		wantOut  string
		wantCode int
	}{
		{"shell syntax", []string{"cd / && echo $((6*7)) $(pwd)"}, "", "42 /", 0},
		{"exit status", []string{"exit 7"}, "", "", 7},
		{"stdin", []string{"wc -c"}, "12345", "5", 0},
		{"stderr is separate", []string{"echo out; echo err >&2"}, "", "out", 0},
		{"pty", []string{"-tt", "tty"}, "", "/dev/pts/", 0},
		{"shell on stdin", nil, "echo via-shell\nexit 3\n", "via-shell", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := f.srv.sshCmd(t, f.good.file, tt.args...)
			if len(tt.args) > 0 && tt.args[0] == "-tt" {
				cmd = exec.Command("ssh", append(append(opensshOpts(t, f.srv.dir, f.srv.addr, f.srv.hostKey, f.good.file),
					"-tt", "-p", f.srv.port(), "dev@127.0.0.1"), tt.args[1:]...)...)
			}
			cmd.Stdin = strings.NewReader(tt.stdin)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := errors.AsType[*exec.ExitError](err); ok {
				code = ee.ExitCode()
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.wantCode, code, "exit code %d, want %d (stderr %q)", code, tt.wantCode, stderr.String())
			assert.Contains(t, stdout.String(), tt.wantOut)
			if tt.wantOut == "out" {
				assert.NotContains(t, stdout.String(), "err")
			}
		})
	}
}

// TestPTYShellWindowChange drives an interactive shell through a PTY with
// the Go client and checks the terminal follows window-change requests.
func TestPTYShellWindowChange(t *testing.T) {
	f := newFixture(t)
	c, err := f.srv.dial("dev", ssh.PublicKeys(f.good.signer))
	require.NoError(t, err)
	defer c.Close()
	sess, err := c.NewSession()
	require.NoError(t, err)
	defer sess.Close()
	require.NoError(t, sess.RequestPty("xterm", 40, 100, ssh.TerminalModes{ssh.ECHO: 0}))
	stdin, _ := sess.StdinPipe()
	var out lockedBuffer
	sess.Stdout = &out
	require.NoError(t, sess.Shell())
	fmt.Fprintln(stdin, `echo "size:$(stty size) term:$TERM"`)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, out.String(), "size:40 100 term:xterm")
	}, 10*time.Second, tick, "initial size")
	require.NoError(t, sess.WindowChange(50, 132))
	fmt.Fprintln(stdin, `echo "size:$(stty size)"`)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, out.String(), "size:50 132")
	}, 10*time.Second, tick, "resized")
	fmt.Fprintln(stdin, "exit 5")
	err = sess.Wait()
	var ee *ssh.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 5, ee.ExitStatus())
}

func sha256File(t *testing.T, path string) [32]byte {
	t.Helper()
	fh, err := os.Open(path)
	require.NoError(t, err)
	defer fh.Close()
	h := sha256.New()
	_, err = io.Copy(h, fh)
	require.NoError(t, err)
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// writeRandomFile writes size pseudo-random (incompressible) bytes.
func writeRandomFile(tb testing.TB, path string, size int64) {
	tb.Helper()
	fh, err := os.Create(path)
	require.NoError(tb, err)
	defer fh.Close()
	r := rand.NewChaCha8([32]byte{1, 2, 3})
	_, err = io.CopyN(fh, r, size)
	require.NoError(tb, err)
}

func sftpBatch(tb testing.TB, s *server, identity, batch string) {
	tb.Helper()
	opts := opensshOpts(tb, s.dir, s.addr, s.hostKey, identity)
	runSFTP(tb, opts, "dev", s.port(), batch)
}

func runSFTP(tb testing.TB, opts []string, user, port, batch string) {
	tb.Helper()
	cmd := exec.Command("sftp", append(append(opts, "-P", port, "-b", "-"), user+"@127.0.0.1")...)
	cmd.Stdin = strings.NewReader(batch)
	out, err := cmd.CombinedOutput()
	require.NoError(tb, err, "sftp:\n%s", out)
}

func TestSFTPPutGet100MB(t *testing.T) {
	needOpenSSH(t, "sftp")
	f := newFixture(t)
	dir := t.TempDir()
	src, remote, back := filepath.Join(dir, "src.bin"), filepath.Join(dir, "remote.bin"), filepath.Join(dir, "back.bin")
	writeRandomFile(t, src, 100<<20)
	want := sha256File(t, src)
	sftpBatch(t, f.srv, f.good.file, fmt.Sprintf("put %s %s\nget %s %s\n", src, remote, remote, back))
	for _, p := range []string{remote, back} {
		assert.Equal(t, want, sha256File(t, p), "%s: sha256", filepath.Base(p))
	}
}

func TestLocalForward(t *testing.T) {
	needOpenSSH(t, "ssh")
	f := newFixture(t)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "jupyter says hi")
	}))
	defer web.Close()
	_, webPort, _ := net.SplitHostPort(web.Listener.Addr().String())

	// A free local port for ssh -L to listen on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	localPort := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()

	cmd := exec.Command("ssh", append(opensshOpts(t, f.srv.dir, f.srv.addr, f.srv.hostKey, f.good.file),
		"-N", "-o", "ExitOnForwardFailure=yes", "-L", "127.0.0.1:"+localPort+":127.0.0.1:"+webPort,
		"-p", f.srv.port(), "dev@127.0.0.1")...)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := http.Get("http://127.0.0.1:" + localPort + "/")
		require.NoError(c, err, "ssh stderr %q", stderr.String())
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		assert.Equal(c, "jupyter says hi", string(body))
	}, 15*time.Second, tick, "GET through ssh -L")
}

// TestForwardRules checks with the Go client that local forwarding reaches
// the Pod's own ports only, and that remote forwarding needs the flag.
func TestForwardRules(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	for _, allowRemote := range []bool{false, true} {
		t.Run(fmt.Sprintf("allow-remote-forward=%v", allowRemote), func(t *testing.T) {
			var extra []string
			if allowRemote {
				extra = []string{"--allow-remote-forward"}
			}
			f := newFixture(t, extra...)
			c, err := f.srv.dial("dev", ssh.PublicKeys(f.good.signer))
			require.NoError(t, err)
			defer c.Close()

			// Local forward to loopback: allowed, and data round-trips.
			fc, err := c.Dial("tcp", echo.Addr().String())
			require.NoError(t, err, "forward to loopback")
			fmt.Fprint(fc, "ping")
			buf := make([]byte, 4)
			_, err = io.ReadFull(fc, buf)
			require.NoError(t, err, "echo through forward")
			require.Equal(t, "ping", string(buf))
			fc.Close()

			// Local forward elsewhere (TEST-NET-1): refused by policy.
			if fc, err := c.Dial("tcp", "192.0.2.1:80"); err == nil {
				fc.Close()
				t.Fatal("forward to 192.0.2.1 succeeded, want refused")
			} else if !strings.Contains(err.Error(), "not this Pod") {
				t.Fatalf("err = %v, want a policy refusal", err)
			}

			ln, err := c.Listen("tcp", "127.0.0.1:0")
			if !allowRemote {
				if err == nil {
					ln.Close()
					t.Fatal("remote forward accepted without --allow-remote-forward")
				}
				return
			}
			require.NoError(t, err, "remote forward")
			defer ln.Close()
			go func() {
				rc, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = io.Copy(rc, rc)
				rc.Close()
			}()
			// Connect inside the "Pod" to the port the server opened.
			pc, err := net.Dial("tcp", ln.Addr().String())
			require.NoError(t, err)
			defer pc.Close()
			fmt.Fprint(pc, "pong")
			_, err = io.ReadFull(pc, buf)
			require.NoError(t, err, "echo through remote forward")
			require.Equal(t, "pong", string(buf))
		})
	}
}

// TestKeyRotation swaps authorized_keys the way kubelet updates a Secret
// volume (a new directory, then an atomic rename of the ..data symlink) and
// checks the running server follows without a restart.
func TestKeyRotation(t *testing.T) {
	needOpenSSH(t, "ssh")
	dir := t.TempDir()
	oldKey, newKey := newUserKey(t, dir, "old"), newUserKey(t, dir, "new")
	vol := filepath.Join(dir, "secret")
	publish := func(version string, k userKey) {
		ts := filepath.Join(vol, version)
		require.NoError(t, os.MkdirAll(ts, 0o755))
		writeAuthorized(t, filepath.Join(ts, "authorized_keys"), k)
		tmp := filepath.Join(vol, "..data_tmp")
		require.NoError(t, os.Symlink(version, tmp))
		require.NoError(t, os.Rename(tmp, filepath.Join(vol, "..data")))
	}
	require.NoError(t, os.MkdirAll(vol, 0o755))
	publish("..v1", oldKey)
	require.NoError(t, os.Symlink("..data/authorized_keys", filepath.Join(vol, "authorized_keys")))
	srv := startServer(t, dir, filepath.Join(vol, "authorized_keys"))
	pid := srv.cmd.Process.Pid

	login := func(k userKey) error {
		out, err := srv.sshCmd(t, k.file, "echo", "in").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	require.NoError(t, login(oldKey), "old key before rotation")
	require.Error(t, login(newKey), "new key accepted before rotation")
	publish("..v2", newKey)
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.NoError(c, login(newKey)) }, 10*time.Second, tick, "new key accepted")
	require.Error(t, login(oldKey), "old key still accepted after rotation")
	require.Nil(t, srv.cmd.ProcessState, "server restarted")
	require.Equal(t, pid, srv.cmd.Process.Pid, "server restarted")
	assert.Contains(t, srv.log.String(), "authorized keys reloaded", "no reload logged")
}

func TestIdleTimeout(t *testing.T) {
	f := newFixture(t, "--idle-timeout", "300ms")
	c, err := f.srv.dial("dev", ssh.PublicKeys(f.good.signer))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, io.EOF, "the server hung up")
	case <-time.After(10 * time.Second):
		c.Close()
		require.Fail(t, "idle connection was not closed")
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, f.srv.log.String(), `"msg":"idle timeout"`)
	}, 5*time.Second, tick, "idle disconnect logged")
}

// TestHostKeyStable restarts the server on the same host key file.
func TestHostKeyStable(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "authorized_keys")
	writeAuthorized(t, keys, newUserKey(t, dir, "k"))
	first := startServer(t, dir, keys)
	_ = first.cmd.Process.Signal(os.Interrupt)
	_ = first.cmd.Wait()
	second := startServer(t, dir, keys)
	require.NotEmpty(t, first.hostKeyFP)
	require.Equal(t, first.hostKeyFP, second.hostKeyFP, "host key changed across restarts")
}

// TestLogsAndMetricsCarryNoSecrets runs a command holding a token and
// checks neither the log nor /metrics repeats it, while both record the
// session and the refused login.
func TestLogsAndMetricsCarryNoSecrets(t *testing.T) {
	f := newFixture(t)
	const token = "tok-5e3cr3t-value"
	c, err := f.srv.dial("dev", ssh.PublicKeys(f.good.signer))
	require.NoError(t, err)
	out, err := runGo(c, "TOKEN="+token+" true && echo done")
	require.NoError(t, err, "%q", out)
	c.Close()
	_, err = f.srv.dial("dev", ssh.Password(token))
	require.Error(t, err, "password accepted")
	_, err = f.srv.dial("dev", ssh.PublicKeys(f.stranger.signer))
	require.Error(t, err, "unknown key accepted")
	var metrics string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := http.Get("http://" + f.srv.metricsAddr + "/metrics")
		require.NoError(c, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		metrics = string(body)
		for _, want := range []string{
			`runplane_ssh_sessions_total{kind="exec"} 1`,
			`runplane_ssh_auth_attempts_total{method="publickey",result="rejected"} 1`,
			`runplane_ssh_connections_total{result="auth_failed"} 2`,
			`runplane_ssh_connections_total{result="ok"} 1`,
			`runplane_ssh_authorized_keys 1`,
		} {
			assert.Contains(c, metrics, want)
		}
	}, 5*time.Second, tick, "metrics record the sessions and refusals")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, want := range []string{`"msg":"session ended"`, `"msg":"auth rejected"`} {
			assert.Contains(c, f.srv.log.String(), want)
		}
	}, 5*time.Second, tick, "session end and refusal logged")
	for name, text := range map[string]string{"log": f.srv.log.String(), "metrics": metrics} {
		assert.NotContains(t, text, token, "%s contains the secret", name)
	}
}

func TestRefusesRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not running as root: the refusal cannot be exercised")
	}
	dir := t.TempDir()
	keys := filepath.Join(dir, "authorized_keys")
	writeAuthorized(t, keys, newUserKey(t, dir, "k"))
	out, err := exec.Command(binPath, "--listen", "127.0.0.1:0", "--authorized-keys", keys,
		"--host-key", filepath.Join(dir, "hk")).CombinedOutput()
	require.Error(t, err, "want a refusal")
	require.Contains(t, string(out), "refusing to run as root")
}

func TestBadFlags(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no authorized keys", []string{"--host-key", filepath.Join(dir, "hk")}, "authorized-keys"},
		{"missing keys file", []string{"--host-key", filepath.Join(dir, "hk"), "--authorized-keys", filepath.Join(dir, "nope")}, "nope"},
		{"zero max channels", []string{"--host-key", filepath.Join(dir, "hk"), "--authorized-keys", filepath.Join(dir, "k"), "--max-channels", "0"}, "max-channels"},
		{"zero per-source limit", []string{"--host-key", filepath.Join(dir, "hk"), "--authorized-keys", filepath.Join(dir, "k"), "--max-unauthenticated-per-source", "0"}, "max-unauthenticated-per-source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--listen", "127.0.0.1:0", "--allow-root"}, tt.args...)
			out, err := exec.Command(binPath, args...).CombinedOutput()
			require.Error(t, err)
			require.Contains(t, string(out), tt.want)
		})
	}
}

// TestSCP copies both ways with scp, which speaks SFTP since OpenSSH 9.
func TestSCP(t *testing.T) {
	needOpenSSH(t, "scp")
	f := newFixture(t)
	dir := t.TempDir()
	src, remote, back := filepath.Join(dir, "src"), filepath.Join(dir, "remote"), filepath.Join(dir, "back")
	writeRandomFile(t, src, 1<<20)
	opts := opensshOpts(t, f.srv.dir, f.srv.addr, f.srv.hostKey, f.good.file)
	for _, args := range [][]string{{src, "dev@127.0.0.1:" + remote}, {"dev@127.0.0.1:" + remote, back}} {
		cmd := exec.Command("scp", append(append(opts, "-P", f.srv.port()), args...)...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "scp %v:\n%s", args, out)
	}
	require.Equal(t, sha256File(t, src), sha256File(t, back), "scp round trip changed the file")
}
