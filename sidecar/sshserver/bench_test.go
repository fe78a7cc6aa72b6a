package sshserver_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
)

// opensshd is Debian's sshd run in the foreground on a loopback port with
// its own config and host key in a temp dir, as the reference to beat.
type opensshd struct {
	addr    string
	hostKey ssh.PublicKey
}

func findSFTPServer() string {
	for _, p := range []string{"/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server", "/usr/lib/ssh/sftp-server"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

func startOpenSSHD(tb testing.TB, dir, authorizedKeys string) *opensshd {
	tb.Helper()
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/sshd"); serr != nil {
			tb.Skipf("OpenSSH sshd not installed (apt-get install openssh-server): %v", err)
		}
		sshd = "/usr/sbin/sshd"
	}
	sftpServer := findSFTPServer()
	if sftpServer == "" {
		tb.Skip("OpenSSH sftp-server not installed (apt-get install openssh-sftp-server)")
	}
	if os.Geteuid() == 0 {
		// sshd running as root insists on its privilege-separation dir.
		require.NoError(tb, os.MkdirAll("/run/sshd", 0o755))
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, _ := ssh.MarshalPrivateKey(priv, "bench sshd")
	hostKeyFile := filepath.Join(dir, "sshd_host_key")
	require.NoError(tb, os.WriteFile(hostKeyFile, pem.EncodeToMemory(block), 0o600))
	signer, _ := ssh.NewSignerFromKey(priv)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg := fmt.Sprintf(`ListenAddress 127.0.0.1:%d
HostKey %s
AuthorizedKeysFile %s
StrictModes no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
PidFile none
LogLevel ERROR
Subsystem sftp %s
`, port, hostKeyFile, authorizedKeys, sftpServer)
	cfgFile := filepath.Join(dir, "sshd_config")
	require.NoError(tb, os.WriteFile(cfgFile, []byte(cfg), 0o600))
	cmd := exec.Command(sshd, "-D", "-e", "-f", cfgFile)
	var log lockedBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	require.NoError(tb, cmd.Start())
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	require.EventuallyWithT(tb, func(c *assert.CollectT) {
		conn, err := net.Dial("tcp", addr)
		require.NoError(c, err, "sshd log %q", log.String())
		conn.Close()
	}, 10*time.Second, tick, "sshd listening")
	return &opensshd{addr: addr, hostKey: signer.PublicKey()}
}

// BenchmarkSFTPThroughput moves a 64 MiB file with the OpenSSH sftp client
// to and from runplane-ssh and, in the same iteration, OpenSSH's sshd +
// sftp-server. It reports MB/s for both and runplane/openssh as "ratio".
//
//	go test -run '^$' -bench SFTPThroughput -benchtime 3x ./sidecar/sshserver/
func BenchmarkSFTPThroughput(b *testing.B) {
	needOpenSSH(b, "sftp")
	const size = 64 << 20
	dir := b.TempDir()
	key := newUserKey(b, dir, "bench")
	keys := filepath.Join(dir, "authorized_keys")
	writeAuthorized(b, keys, key)
	ref := startOpenSSHD(b, dir, keys)
	ours := startServer(b, dir, keys, "--idle-timeout", "-1s")
	src := filepath.Join(dir, "src.bin")
	writeRandomFile(b, src, size)

	me, err := user.Current()
	require.NoError(b, err)
	// sshd needs a real account; runplane-ssh accepts any name.
	servers := []struct {
		name    string
		addr    string
		user    string
		hostKey ssh.PublicKey
	}{
		{"runplane", ours.addr, "dev", ours.hostKey},
		{"openssh", ref.addr, me.Username, ref.hostKey},
	}
	for _, cipher := range []string{"aes128-gcm@openssh.com", "chacha20-poly1305@openssh.com"} {
		for _, dirn := range []string{"put", "get"} {
			b.Run(cipher+"/"+dirn, func(b *testing.B) {
				elapsed := make([]time.Duration, len(servers))
				for range b.N {
					for i, s := range servers {
						remote := filepath.Join(dir, s.name+".remote")
						batch := fmt.Sprintf("put %s %s\n", src, remote)
						if dirn == "get" {
							if _, err := os.Stat(remote); err != nil {
								require.NoError(b, os.Link(src, remote))
							}
							batch = fmt.Sprintf("get %s %s\n", remote, filepath.Join(dir, s.name+".local"))
						}
						opts := append(opensshOpts(b, dir, s.addr, s.hostKey, key.file), "-c", cipher)
						_, port, _ := net.SplitHostPort(s.addr)
						start := time.Now()
						runSFTP(b, opts, s.user, port, batch)
						elapsed[i] += time.Since(start)
					}
				}
				mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
				b.ReportMetric(mbps(elapsed[0]), "runplane-MB/s")
				b.ReportMetric(mbps(elapsed[1]), "openssh-MB/s")
				b.ReportMetric(mbps(elapsed[0])/mbps(elapsed[1]), "ratio")
			})
		}
	}
}
