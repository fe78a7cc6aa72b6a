package sshserver_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runplane/runplane/test/runplanebin"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
)

// binPath is the runplane-ssh binary under test, built once in TestMain.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "runplane-ssh-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin, err := runplanebin.Dir(context.Background(), dir, "runplane-ssh")
	if err != nil {
		fmt.Fprintln(os.Stderr, "build runplane-ssh:", err)
		os.Exit(1)
	}
	binPath = filepath.Join(bin, "runplane-ssh")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// userKey is a client key pair, also saved as files for the OpenSSH client.
type userKey struct {
	signer ssh.Signer
	file   string // private key in OpenSSH format
}

func newUserKey(tb testing.TB, dir, name string) userKey {
	tb.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(tb, err)
	signer, err := ssh.NewSignerFromKey(priv)
	require.NoError(tb, err)
	block, err := ssh.MarshalPrivateKey(priv, name)
	require.NoError(tb, err)
	file := filepath.Join(dir, name)
	require.NoError(tb, os.WriteFile(file, pem.EncodeToMemory(block), 0o600))
	return userKey{signer: signer, file: file}
}

func (k userKey) authorizedLine() []byte { return ssh.MarshalAuthorizedKey(k.signer.PublicKey()) }

func writeAuthorized(tb testing.TB, path string, keys ...userKey) {
	tb.Helper()
	var b []byte
	for _, k := range keys {
		b = append(b, k.authorizedLine()...)
	}
	require.NoError(tb, os.WriteFile(path, b, 0o600))
}

// lockedBuffer collects the server's log for assertions.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type server struct {
	addr        string // SSH host:port
	metricsAddr string
	hostKeyFP   string
	hostKey     ssh.PublicKey
	dir         string
	keysFile    string
	cmd         *exec.Cmd
	log         *lockedBuffer
}

func (s *server) port() string { _, p, _ := net.SplitHostPort(s.addr); return p }

// startServer runs the built binary with keysFile as --authorized-keys and
// a host key in dir, plus extra flags. It returns once the server listens.
func startServer(tb testing.TB, dir, keysFile string, extra ...string) *server {
	tb.Helper()
	hostKey := filepath.Join(dir, "host_key")
	args := []string{"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--authorized-keys", keysFile, "--host-key", hostKey, "--keys-poll-interval", "100ms"}
	if os.Geteuid() == 0 {
		args = append(args, "--allow-root") // CI containers run tests as root
	}
	args = append(args, extra...)
	cmd := exec.Command(binPath, args...)
	cmd.Env = append(os.Environ(), "SHELL=/bin/sh")
	stderr, err := cmd.StderrPipe()
	require.NoError(tb, err)
	require.NoError(tb, cmd.Start())
	s := &server{dir: dir, keysFile: keysFile, cmd: cmd, log: &lockedBuffer{}}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(s.log, line)
			var rec struct{ Msg, Addr, HostKey string }
			if json.Unmarshal([]byte(line), &rec) != nil {
				continue
			}
			switch rec.Msg {
			case "metrics listening":
				s.metricsAddr = rec.Addr
			case "listening":
				s.addr, s.hostKeyFP = rec.Addr, rec.HostKey
				close(ready)
			}
		}
	}()
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if tb.Failed() {
			tb.Logf("server log:\n%s", s.log.String())
		}
	})
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		tb.Fatalf("server did not start; log:\n%s", s.log.String())
	}
	data, err := os.ReadFile(hostKey)
	require.NoError(tb, err)
	hk, err := ssh.ParsePrivateKey(data)
	require.NoError(tb, err)
	s.hostKey = hk.PublicKey()
	return s
}

// dial connects with the Go SSH client, pinning the server's host key.
func (s *server) dial(user string, auth ...ssh.AuthMethod) (*ssh.Client, error) {
	return ssh.Dial("tcp", s.addr, &ssh.ClientConfig{
		User: user, Auth: auth, HostKeyCallback: ssh.FixedHostKey(s.hostKey), Timeout: 10 * time.Second,
	})
}

// needOpenSSH skips when an OpenSSH client binary is absent.
func needOpenSSH(tb testing.TB, names ...string) {
	tb.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			tb.Skipf("OpenSSH %q not installed (apt-get install openssh-client): %v", n, err)
		}
	}
}

// opensshOpts are the options every OpenSSH client run uses: no user
// config, strict host key checking against the server's real key, and
// non-interactive auth with exactly the given identity.
func opensshOpts(tb testing.TB, dir, addr string, hostKey ssh.PublicKey, identity string) []string {
	tb.Helper()
	host, port, _ := net.SplitHostPort(addr)
	kh := filepath.Join(dir, "known_hosts_"+port)
	line := fmt.Sprintf("[%s]:%s %s", host, port, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostKey))))
	require.NoError(tb, os.WriteFile(kh, []byte(line+"\n"), 0o600))
	return []string{"-F", "/dev/null", "-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=" + kh,
		"-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none", "-o", "LogLevel=ERROR",
		"-o", "ConnectTimeout=10", "-i", identity}
}

func (s *server) sshCmd(tb testing.TB, identity string, args ...string) *exec.Cmd {
	opts := opensshOpts(tb, s.dir, s.addr, s.hostKey, identity)
	all := append(append(opts, "-p", s.port(), "-l", "dev"), "127.0.0.1")
	return exec.Command("ssh", append(all, args...)...)
}

// tick is the interval of every poll in this package's tests.
const tick = 100 * time.Millisecond
