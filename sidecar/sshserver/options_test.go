package sshserver_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
)

// optLine is an authorized_keys line: options (may be empty) and a key.
type optLine struct {
	opts string
	key  userKey
}

// startWithLines runs a server whose authorized_keys holds lines, in order.
func startWithLines(t *testing.T, dir string, lines []optLine, extra ...string) *server {
	t.Helper()
	var b strings.Builder
	for _, l := range lines {
		if l.opts != "" {
			b.WriteString(l.opts + " ")
		}
		b.Write(l.key.authorizedLine())
	}
	keys := filepath.Join(dir, "authorized_keys")
	require.NoError(t, os.WriteFile(keys, []byte(b.String()), 0o600))
	return startServer(t, dir, keys, extra...)
}

// scrape returns the server's /metrics text.
func (s *server) scrape(t require.TestingT) string {
	resp, err := http.Get("http://" + s.metricsAddr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// waitMetrics waits until /metrics contains every want line.
func (s *server) waitMetrics(t *testing.T, want ...string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m := s.scrape(c)
		for _, w := range want {
			assert.Contains(c, m, w)
		}
	}, 10*time.Second, tick, "metrics")
}

// echoServer listens on loopback and echoes every connection.
func echoServer(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	return ln
}

func echoThrough(t *testing.T, c *ssh.Client, addr string) error {
	t.Helper()
	fc, err := c.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer fc.Close()
	_, err = fmt.Fprint(fc, "ping")
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(fc, buf)
	require.NoError(t, err, "echo through forward")
	require.Equal(t, "ping", string(buf))
	return nil
}

func TestForcedCommand(t *testing.T) {
	dir := t.TempDir()
	forced, sftpOnly, empty := newUserKey(t, dir, "forced"), newUserKey(t, dir, "sftponly"), newUserKey(t, dir, "empty")
	srv := startWithLines(t, dir, []optLine{
		{`command="echo forced:$SSH_ORIGINAL_COMMAND"`, forced},
		{`restrict,command="internal-sftp"`, sftpOnly},
		{`command=""`, empty},
	})
	c, err := srv.dial("dev", ssh.PublicKeys(forced.signer))
	require.NoError(t, err)
	defer c.Close()

	t.Run("exec runs the forced command", func(t *testing.T) {
		out, err := runGo(c, "echo the-real-command-ran; whoami")
		require.NoError(t, err)
		assert.Equal(t, "forced:echo the-real-command-ran; whoami\n", out)
	})
	t.Run("shell runs the forced command without SSH_ORIGINAL_COMMAND", func(t *testing.T) {
		sess, err := c.NewSession()
		require.NoError(t, err)
		defer sess.Close()
		var out bytes.Buffer
		sess.Stdout = &out
		require.NoError(t, sess.Shell())
		require.NoError(t, sess.Wait())
		assert.Equal(t, "forced:\n", out.String())
	})
	t.Run("sftp subsystem runs the forced command", func(t *testing.T) {
		sess, err := c.NewSession()
		require.NoError(t, err)
		defer sess.Close()
		stdout, err := sess.StdoutPipe()
		require.NoError(t, err)
		stdin, err := sess.StdinPipe()
		require.NoError(t, err)
		require.NoError(t, sess.RequestSubsystem("sftp"))
		// EOF on stdin ends a real SFTP server too, so this cannot hang. The
		// forced command may already have ended and closed the channel: then
		// closing stdin answers io.EOF.
		if err := stdin.Close(); !errors.Is(err, io.EOF) {
			require.NoError(t, err)
		}
		out, err := io.ReadAll(stdout)
		require.NoError(t, err)
		assert.Equal(t, "forced:internal-sftp\n", string(out))
	})
	t.Run("client env cannot set SSH_ORIGINAL_COMMAND", func(t *testing.T) {
		sess, err := c.NewSession()
		require.NoError(t, err)
		defer sess.Close()
		assert.Error(t, sess.Setenv("SSH_ORIGINAL_COMMAND", "spoofed"))
		out, err := sess.CombinedOutput("real")
		require.NoError(t, err)
		assert.Equal(t, "forced:real\n", string(out))
	})
	t.Run(`command="" runs nothing, not a shell`, func(t *testing.T) {
		ec, err := srv.dial("dev", ssh.PublicKeys(empty.signer))
		require.NoError(t, err)
		defer ec.Close()
		out, err := runGo(ec, "echo the-real-command-ran")
		require.NoError(t, err)
		assert.Empty(t, out)
		sess, err := ec.NewSession()
		require.NoError(t, err)
		defer sess.Close()
		sess.Stdin = strings.NewReader("echo a-shell-ran\n")
		out2, err := sess.CombinedOutput("")
		require.NoError(t, err)
		assert.Empty(t, string(out2), "a shell read stdin")
	})
	t.Run("internal-sftp refuses exec", func(t *testing.T) {
		sc, err := srv.dial("dev", ssh.PublicKeys(sftpOnly.signer))
		require.NoError(t, err)
		defer sc.Close()
		out, err := runGo(sc, "id")
		var ee *ssh.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, 1, ee.ExitStatus())
		assert.Equal(t, "This service allows sftp connections only.\n", out)
	})

	t.Run("openssh", func(t *testing.T) {
		needOpenSSH(t, "ssh", "sftp")
		out, err := srv.sshCmd(t, forced.file, "echo", "real").Output()
		require.NoError(t, err)
		assert.Equal(t, "forced:echo real\n", string(out))

		// sftp with the forced key talks to the forced command, not SFTP.
		target := filepath.Join(t.TempDir(), "put")
		cmd := exec.Command("sftp", append(opensshOpts(t, srv.dir, srv.addr, srv.hostKey, forced.file),
			"-P", srv.port(), "-b", "-", "dev@127.0.0.1")...)
		cmd.Stdin = strings.NewReader("put " + srv.keysFile + " " + target + "\n")
		sftpOut, err := cmd.CombinedOutput()
		require.Error(t, err, "sftp through a forced command succeeded:\n%s", sftpOut)
		assert.NoFileExists(t, target)

		// The internal-sftp key: sftp works, a command does not.
		sftpBatch(t, srv, sftpOnly.file, "put "+srv.keysFile+" "+target+"\n")
		assert.FileExists(t, target)
		var stderr bytes.Buffer
		cmd = srv.sshCmd(t, sftpOnly.file, "id")
		cmd.Stderr = &stderr
		out, err = cmd.Output()
		require.Error(t, err)
		assert.Empty(t, out)
		assert.Contains(t, stderr.String(), "This service allows sftp connections only.")
	})
}

func TestNoPTY(t *testing.T) {
	dir := t.TempDir()
	noPTY, restricted, restrictPTY := newUserKey(t, dir, "nopty"), newUserKey(t, dir, "restrict"), newUserKey(t, dir, "restrictpty")
	srv := startWithLines(t, dir, []optLine{{"no-pty", noPTY}, {"restrict", restricted}, {"restrict,pty", restrictPTY}})
	tests := []struct {
		name   string
		key    userKey
		wantOK bool
	}{
		{"no-pty", noPTY, false},
		{"restrict", restricted, false},
		{"restrict,pty", restrictPTY, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := srv.dial("dev", ssh.PublicKeys(tt.key.signer))
			require.NoError(t, err)
			defer c.Close()
			sess, err := c.NewSession()
			require.NoError(t, err)
			defer sess.Close()
			err = sess.RequestPty("xterm", 24, 80, ssh.TerminalModes{})
			if !tt.wantOK {
				require.Error(t, err, "pty-req granted")
				// The session itself still works, without a terminal.
				out, err := sess.CombinedOutput("tty || true")
				require.NoError(t, err)
				assert.Contains(t, string(out), "not a tty")
				return
			}
			require.NoError(t, err)
			out, err := sess.CombinedOutput("tty")
			require.NoError(t, err)
			assert.Contains(t, string(out), "/dev/pts/")
		})
	}
	t.Run("openssh", func(t *testing.T) {
		needOpenSSH(t, "ssh")
		opts := opensshOpts(t, srv.dir, srv.addr, srv.hostKey, noPTY.file)
		cmd := exec.Command("ssh", append(opts, "-tt", "-p", srv.port(), "dev@127.0.0.1", "tty || true")...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		// With -tt a refused PTY is fatal to the OpenSSH client (exit 255).
		err := cmd.Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "ssh -tt succeeded with a refused PTY")
		assert.Equal(t, 255, ee.ExitCode())
		assert.Contains(t, stderr.String(), "PTY allocation request failed")
	})
	srv.waitMetrics(t, `runplane_ssh_key_option_denials_total{option="pty"}`)
}

func TestNoPortForwarding(t *testing.T) {
	echo := echoServer(t)
	dir := t.TempDir()
	noFwd, restricted, restrictFwd := newUserKey(t, dir, "nofwd"), newUserKey(t, dir, "restrict"), newUserKey(t, dir, "restrictfwd")
	srv := startWithLines(t, dir, []optLine{{"no-port-forwarding", noFwd}, {"restrict", restricted},
		{"restrict,port-forwarding", restrictFwd}}, "--allow-remote-forward")
	tests := []struct {
		name   string
		key    userKey
		wantOK bool
	}{
		{"no-port-forwarding", noFwd, false},
		{"restrict", restricted, false},
		{"restrict,port-forwarding", restrictFwd, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := srv.dial("dev", ssh.PublicKeys(tt.key.signer))
			require.NoError(t, err)
			defer c.Close()
			err = echoThrough(t, c, echo.Addr().String())
			ln, lerr := c.Listen("tcp", "127.0.0.1:0")
			if lerr == nil {
				ln.Close()
			}
			if tt.wantOK {
				require.NoError(t, err, "ssh -L")
				require.NoError(t, lerr, "ssh -R")
				return
			}
			var oe *ssh.OpenChannelError
			require.ErrorAs(t, err, &oe, "ssh -L allowed")
			assert.Equal(t, ssh.Prohibited, oe.Reason)
			assert.Contains(t, oe.Message, "port forwarding is disabled for this key")
			require.Error(t, lerr, "ssh -R allowed")
		})
	}
	srv.waitMetrics(t, `runplane_ssh_key_option_denials_total{option="port-forwarding"} 4`)
}

func TestPermitOpen(t *testing.T) {
	allowed, other := echoServer(t), echoServer(t)
	dir := t.TempDir()
	k := newUserKey(t, dir, "k")
	_, port, _ := net.SplitHostPort(allowed.Addr().String())
	srv := startWithLines(t, dir, []optLine{{`permitopen="127.0.0.1:` + port + `",permitopen="192.0.2.1:*"`, k}})
	c, err := srv.dial("dev", ssh.PublicKeys(k.signer))
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, echoThrough(t, c, allowed.Addr().String()), "listed target")

	err = echoThrough(t, c, other.Addr().String())
	var oe *ssh.OpenChannelError
	require.ErrorAs(t, err, &oe, "unlisted target reached")
	assert.Equal(t, ssh.Prohibited, oe.Reason)
	assert.Contains(t, oe.Message, "permitopen")
	// "localhost" is not the literal "127.0.0.1": no name lookup, as in OpenSSH.
	_, err = c.Dial("tcp", "localhost:"+port)
	require.ErrorAs(t, err, &oe)
	// Listed, but the server's own rule (only this Pod) still applies.
	_, err = c.Dial("tcp", "192.0.2.1:80")
	require.ErrorAs(t, err, &oe)
	assert.Contains(t, oe.Message, "not this Pod")
	srv.waitMetrics(t, `runplane_ssh_key_option_denials_total{option="permitopen"} 2`)
}

func TestFromRefusesKey(t *testing.T) {
	dir := t.TempDir()
	notLoopback, tenNet, loopback := newUserKey(t, dir, "notlo"), newUserKey(t, dir, "ten"), newUserKey(t, dir, "lo")
	srv := startWithLines(t, dir, []optLine{
		{`from="!127.0.0.1,*"`, notLoopback},
		{`from="10.0.0.0/8,192.168.*"`, tenNet},
		{`from="10.0.0.0/8,127.0.0.0/8"`, loopback},
	})
	for _, k := range []userKey{notLoopback, tenNet} {
		_, err := srv.dial("dev", ssh.PublicKeys(k.signer))
		require.Error(t, err, "key with a non-matching from= accepted")
		assert.Contains(t, err.Error(), "unable to authenticate")
	}
	c, err := srv.dial("dev", ssh.PublicKeys(loopback.signer))
	require.NoError(t, err, "matching from=")
	out, err := runGo(c, "echo in")
	require.NoError(t, err)
	assert.Equal(t, "in\n", out)
	c.Close()
	if _, err := exec.LookPath("ssh"); err == nil {
		var stderr bytes.Buffer
		cmd := srv.sshCmd(t, notLoopback.file, "echo", "in")
		cmd.Stderr = &stderr
		require.Error(t, cmd.Run())
		assert.Contains(t, stderr.String(), "Permission denied (publickey)")
	}
	srv.waitMetrics(t, `runplane_ssh_key_refusals_total{reason="from"}`, `runplane_ssh_connections_total{result="ok"} 1`)
	assert.Contains(t, srv.log.String(), `"msg":"key refused by authorized_keys"`)
}

func TestUnsupportedOptionRefusesKey(t *testing.T) {
	dir := t.TempDir()
	good := newUserKey(t, dir, "good")
	lines := []optLine{
		{`tunnel="0"`, newUserKey(t, dir, "tunnel")},
		{`cert-authority`, newUserKey(t, dir, "ca")},
		{`expiry-time="20991231"`, newUserKey(t, dir, "expiry")},
		{`no-pty,frobnicate`, newUserKey(t, dir, "unknown")},
		{`environment="LD_PRELOAD=/tmp/x.so"`, newUserKey(t, dir, "env")},
		{`from=127.0.0.1`, newUserKey(t, dir, "unquoted")},
		{"", good},
	}
	srv := startWithLines(t, dir, lines)
	for _, l := range lines[:len(lines)-1] {
		_, err := srv.dial("dev", ssh.PublicKeys(l.key.signer))
		require.Error(t, err, "key with %q accepted", l.opts)
		assert.Contains(t, err.Error(), "unable to authenticate")
	}
	c, err := srv.dial("dev", ssh.PublicKeys(good.signer))
	require.NoError(t, err, "plain key on the same file")
	c.Close()
	srv.waitMetrics(t,
		`runplane_ssh_authorized_keys_refused_lines{reason="unsupported_option"} 5`,
		`runplane_ssh_authorized_keys_refused_lines{reason="invalid_option"} 1`,
		`runplane_ssh_authorized_keys 1`,
		`runplane_ssh_key_refusals_total{reason="options"} 6`)
	log := srv.log.String()
	for i, opt := range []string{"tunnel", "cert-authority", "expiry-time", "frobnicate", "environment", "from"} {
		assert.Contains(t, log, fmt.Sprintf(`"line":%d,"reason":`, i+1), "refusal of line %d logged", i+1)
		assert.Contains(t, log, fmt.Sprintf(`"option":%q`, opt))
	}
	assert.NotContains(t, log, "LD_PRELOAD", "option values are not logged")
}

func TestChannelLimit(t *testing.T) {
	echo := echoServer(t)
	f := newFixture(t, "--max-channels", "3")
	c, err := f.srv.dial("dev", ssh.PublicKeys(f.good.signer))
	require.NoError(t, err)
	defer c.Close()
	var open []*ssh.Session
	for range 3 {
		s, err := c.NewSession()
		require.NoError(t, err)
		open = append(open, s)
	}
	_, err = c.NewSession()
	var oe *ssh.OpenChannelError
	require.ErrorAs(t, err, &oe, "fourth channel opened")
	assert.Equal(t, ssh.ResourceShortage, oe.Reason)
	_, err = c.Dial("tcp", echo.Addr().String())
	require.ErrorAs(t, err, &oe, "forward beyond the limit opened")
	assert.Equal(t, ssh.ResourceShortage, oe.Reason)
	f.srv.waitMetrics(t, `runplane_ssh_channels_rejected_total{reason="limit"} 2`)

	// The three open ones work.
	for i, s := range open {
		out, err := s.CombinedOutput(fmt.Sprintf("echo %d", i))
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("%d\n", i), string(out))
	}
	// They have ended: their slots are free again.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, echoThrough(t, c, echo.Addr().String()))
	}, 10*time.Second, tick, "channel after the others closed")
}

// TestUnauthenticatedLimit: --max-unauthenticated bounds the handshakes of
// all sources together; each of the silent connections comes from its own
// address, so the per-source limit is not what refuses the fourth.
func TestUnauthenticatedLimit(t *testing.T) {
	f := newFixture(t, "--max-unauthenticated", "3")
	var raw []net.Conn
	for _, src := range []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"} {
		nc, held := f.srv.silentFrom(t, src)
		require.True(t, held, "connection from %s closed before the handshake", src)
		raw = append(raw, nc)
	}
	f.srv.waitMetrics(t, "runplane_ssh_unauthenticated_connections 3")

	_, held := f.srv.silentFrom(t, "127.0.0.4")
	assert.False(t, held, "the fourth connection got a banner")
	f.srv.waitMetrics(t, "runplane_ssh_unauthenticated_refused_total 1", "runplane_ssh_unauthenticated_per_source_refused_total 0")

	// One leaves: a real client is served again.
	raw[0].Close()
	f.srv.waitMetrics(t, "runplane_ssh_unauthenticated_connections 2")
	c, err := f.srv.dial("dev", ssh.PublicKeys(f.good.signer))
	require.NoError(t, err)
	defer c.Close()
	out, err := runGo(c, "echo served")
	require.NoError(t, err)
	assert.Equal(t, "served\n", out)
	f.srv.waitMetrics(t, "runplane_ssh_unauthenticated_connections 2")
	assert.Contains(t, f.srv.log.String(), "unauthenticated connection limit reached")
}

// dialFrom connects with the Go SSH client from the loopback address src
// (all of 127.0.0.0/8 is on Linux's loopback), pinning the host key.
func (s *server) dialFrom(src, user string, auth ...ssh.AuthMethod) (*ssh.Client, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	nc, err := d.Dial("tcp", s.addr)
	if err != nil {
		return nil, err
	}
	cc, chans, reqs, err := ssh.NewClientConn(nc, s.addr, &ssh.ClientConfig{
		User: user, Auth: auth, HostKeyCallback: ssh.FixedHostKey(s.hostKey), Timeout: 10 * time.Second,
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return ssh.NewClient(cc, chans, reqs), nil
}

// silentFrom opens a TCP connection from src that never speaks SSH and
// reports whether the server took it into the handshake (it sends its
// version line first) or closed it before. Reading that answer is the
// barrier: the server has decided about this connection when it returns.
func (s *server) silentFrom(t *testing.T, src string) (net.Conn, bool) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	nc, err := d.Dial("tcp", s.addr)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(10*time.Second)))
	line, err := bufio.NewReader(nc).ReadString('\n')
	if err == nil {
		require.True(t, strings.HasPrefix(line, "SSH-2.0-runplane"), "banner %q", line)
		return nc, true
	}
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the server neither answered nor closed the connection")
	if !errors.Is(err, io.EOF) {
		require.ErrorIs(t, err, syscall.ECONNRESET)
	}
	return nc, false
}

// TestUnauthenticatedPerSourceLimit: silent connections from one address
// hold at most --max-unauthenticated-per-source (3) handshake slots, so
// ten of them no longer lock every key out: the 4th and later are closed
// before the banner, a key login from another address is served at once,
// and a slot freed by the first address is its own again.
func TestUnauthenticatedPerSourceLimit(t *testing.T) {
	f := newFixture(t) // the defaults: the attack needs no help from flags
	var held []net.Conn
	for i := range 10 {
		nc, ok := f.srv.silentFrom(t, "127.0.0.1")
		if i < 3 {
			require.True(t, ok, "silent connection %d from 127.0.0.1 closed before the handshake", i+1)
			held = append(held, nc)
			continue
		}
		assert.False(t, ok, "silent connection %d from 127.0.0.1 held a handshake slot", i+1)
	}
	c, err := f.srv.dialFrom("127.0.0.2", "dev", ssh.PublicKeys(f.good.signer))
	require.NoError(t, err, "a key login from another address while 127.0.0.1 holds its slots")
	out, err := runGo(c, "echo served")
	require.NoError(t, err)
	assert.Equal(t, "served\n", out)
	c.Close()
	f.srv.waitMetrics(t, "runplane_ssh_unauthenticated_connections 3",
		"runplane_ssh_unauthenticated_per_source_refused_total 7", "runplane_ssh_unauthenticated_refused_total 0")

	held[0].Close()
	f.srv.waitMetrics(t, "runplane_ssh_unauthenticated_connections 2")
	c, err = f.srv.dialFrom("127.0.0.1", "dev", ssh.PublicKeys(f.good.signer))
	require.NoError(t, err, "127.0.0.1 again once one of its slots is free")
	c.Close()
	log := f.srv.log.String()
	assert.Contains(t, log, "unauthenticated connections from one source at the limit")
	assert.Equal(t, 1, strings.Count(log, "unauthenticated connections from one source at the limit"), "logged once per episode, not per refusal")
}

// TestLoginGraceTime checks a connection that never authenticates is closed
// after --login-grace-time, and counted as such.
func TestLoginGraceTime(t *testing.T) {
	f := newFixture(t, "--login-grace-time", "300ms")
	nc, err := net.Dial("tcp", f.srv.addr)
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(10*time.Second)))
	got, err := io.ReadAll(nc) // the banner, then EOF when the server gives up
	require.NoError(t, err, "connection not closed by the login grace time")
	assert.True(t, strings.HasPrefix(string(got), "SSH-2.0-runplane"), "banner %q", got)
	f.srv.waitMetrics(t, `runplane_ssh_connections_total{result="login_timeout"} 1`,
		"runplane_ssh_unauthenticated_connections 0")
}
