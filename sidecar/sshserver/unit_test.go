package sshserver

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runplane/runplane/internal/refusal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
)

func newPub(t *testing.T) ssh.PublicKey {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	k, err := ssh.NewPublicKey(pub)
	require.NoError(t, err)
	return k
}

func TestParseAuthorizedKeys(t *testing.T) {
	a, b := newPub(t), newPub(t)
	line := func(k ssh.PublicKey) string { return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) }
	w := func(k ssh.PublicKey) string { return string(k.Marshal()) }
	tests := []struct {
		name    string
		content string
		want    map[string][]int // key (wire) -> usable line numbers
		refused []RefusedLine
	}{
		{"empty", "", nil, nil},
		{"comments and blanks", "# team keys\n\n   \n", nil, nil},
		{"two keys", line(a) + " alice@laptop\n" + line(b) + "\n", map[string][]int{w(a): {1}, w(b): {2}}, nil},
		{"supported options", `no-pty,from="10.0.0.1" ` + line(a) + "\n", map[string][]int{w(a): {1}}, nil},
		{"malformed line is refused", "ssh-ed25519 notbase64\n" + line(b) + "\n", map[string][]int{w(b): {2}},
			[]RefusedLine{{Line: 1, Reason: reasonMalformed, Detail: "not a valid key line"}}},
		{"unsupported option refuses the line", "\n" + `tunnel="0" ` + line(a) + "\n" + line(b) + "\n", map[string][]int{w(b): {3}},
			[]RefusedLine{{Line: 2, Reason: reasonUnsupported, Option: "tunnel", Detail: "tun device forwarding is not supported"}}},
		{"same key on a refused and a usable line", "cert-authority " + line(a) + "\n" + `from="127.0.0.1" ` + line(a) + "\n" + line(a) + "\n",
			map[string][]int{w(a): {2, 3}},
			[]RefusedLine{{Line: 1, Reason: reasonUnsupported, Option: "cert-authority", Detail: "certificate authorities are not supported"}}},
		{"crlf", line(a) + "\r\n", map[string][]int{w(a): {1}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParseAuthorizedKeys([]byte(tt.content))
			require.Len(t, got.Keys, len(tt.want))
			for k, lines := range tt.want {
				var gotLines []int
				for _, l := range got.Keys[k] {
					gotLines = append(gotLines, l.Line)
				}
				assert.Equal(t, lines, gotLines)
			}
			assert.Equal(t, tt.refused, got.Refused)
		})
	}
}

func TestKeySetAuthorize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "authorized_keys")
	a, b, c, d := newPub(t), newPub(t), newPub(t), newPub(t)
	line := func(opts string, k ssh.PublicKey) string {
		return opts + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) + "\n"
	}
	content := line(`from="10.0.0.0/8",no-pty`, a) + line(`from="127.0.0.1"`, a) +
		line(`from="!127.0.0.1,*"`, b) + line("cert-authority", c)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	ks := NewKeySet(path, discardLogger())
	_, err := ks.Reload()
	require.NoError(t, err)

	// The first line whose from= matches wins.
	l, err := ks.Authorize(a, "10.1.1.1")
	require.NoError(t, err)
	assert.Equal(t, 1, l.Line)
	assert.False(t, l.Options.PTY)
	l, err = ks.Authorize(a, "127.0.0.1")
	require.NoError(t, err)
	assert.Equal(t, 2, l.Line)
	assert.True(t, l.Options.PTY)

	var kr *refusal.Error
	_, err = ks.Authorize(a, "192.168.0.1")
	require.ErrorAs(t, err, &kr)
	assert.Equal(t, "from", kr.Reason)
	_, err = ks.Authorize(b, "127.0.0.1")
	require.ErrorAs(t, err, &kr)
	assert.Equal(t, "from", kr.Reason)
	_, err = ks.Authorize(b, "10.0.0.1")
	require.NoError(t, err)
	_, err = ks.Authorize(c, "127.0.0.1")
	require.ErrorAs(t, err, &kr)
	assert.Equal(t, "options", kr.Reason)
	assert.Contains(t, kr.Error(), "authorized_keys line 4:")
	_, err = ks.Authorize(d, "127.0.0.1")
	require.ErrorIs(t, err, errNotListed)
	assert.Equal(t, map[string]int{reasonUnsupported: 1, reasonInvalid: 0, reasonMalformed: 0}, ks.RefusedByReason())
}

func TestKeySetReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "authorized_keys")
	a, b := newPub(t), newPub(t)
	ks := NewKeySet(path, discardLogger())
	_, err := ks.Reload()
	require.Error(t, err, "missing file: want an error")
	require.False(t, ks.Allowed(a), "missing file must allow nobody")
	write := func(keys ...ssh.PublicKey) {
		var s []byte
		for _, k := range keys {
			s = append(s, ssh.MarshalAuthorizedKey(k)...)
		}
		require.NoError(t, os.WriteFile(path, s, 0o600))
	}
	steps := []struct {
		keys        []ssh.PublicKey
		wantChanged bool
		allowA      bool
		allowB      bool
	}{
		{[]ssh.PublicKey{a}, true, true, false},
		{[]ssh.PublicKey{a}, false, true, false},
		{[]ssh.PublicKey{b}, true, false, true},
		{nil, true, false, false},
	}
	for i, st := range steps {
		write(st.keys...)
		changed, err := ks.Reload()
		require.NoError(t, err, "step %d", i)
		assert.Equal(t, st.wantChanged, changed, "step %d: changed", i)
		assert.Equal(t, st.allowA, ks.Allowed(a), "step %d: a allowed", i)
		assert.Equal(t, st.allowB, ks.Allowed(b), "step %d: b allowed", i)
	}
}

func TestLoadOrCreateHostKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "host_key")
	first, err := LoadOrCreateHostKey(path)
	require.NoError(t, err)
	assert.Equal(t, ssh.KeyAlgoED25519, first.PublicKey().Type(), "type = %s, want ed25519", first.PublicKey().Type())
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.EqualValues(t, 0o600, st.Mode().Perm(), "mode = %v, want 0600", st.Mode().Perm())
	again, err := LoadOrCreateHostKey(path)
	require.NoError(t, err)
	assert.Equal(t, ssh.FingerprintSHA256(again.PublicKey()), ssh.FingerprintSHA256(first.PublicKey()), "host key changed on reload")
	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, []byte("junk"), 0o600))
	_, err = LoadOrCreateHostKey(bad)
	assert.ErrorContains(t, err, bad, "corrupt key")
}

func TestForwardTarget(t *testing.T) {
	tests := []struct {
		host    string
		port    uint32
		want    string
		wantErr string
	}{
		{"127.0.0.1", 8888, "127.0.0.1:8888", ""},
		{"::1", 22, "[::1]:22", ""},
		{"localhost", 8888, "127.0.0.1:8888", ""},
		{"192.0.2.10", 80, "", "not this Pod"},
		{"127.0.0.1", 0, "", "out of range"},
		{"127.0.0.1", 70000, "", "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			got, err := forwardTarget(context.Background(), tt.host, tt.port)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr, "err = %v, want containing %q", err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			if tt.host == "localhost" && strings.HasPrefix(got, "[::1]") {
				return // some resolvers answer ::1 first
			}
			assert.Equal(t, tt.want, got, "got %s, want %s", got, tt.want)
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no keys", Config{HostKey: "h"}, "authorized-keys"},
		{"no host key", Config{AuthorizedKeys: "a"}, "host-key"},
		{"negative poll", Config{AuthorizedKeys: "a", HostKey: "h", KeysPollInterval: -1}, "keys-poll-interval"},
		{"negative max channels", Config{AuthorizedKeys: "a", HostKey: "h", MaxChannels: -1}, "max-channels"},
		{"negative max unauthenticated", Config{AuthorizedKeys: "a", HostKey: "h", MaxUnauthenticated: -1}, "max-unauthenticated"},
		{"negative login grace", Config{AuthorizedKeys: "a", HostKey: "h", LoginGraceTime: -1}, "login-grace-time"},
		// A tenant's container: metrics on loopback only (issue #30).
		{"metrics on every interface", Config{AuthorizedKeys: "a", HostKey: "h", MetricsListen: ":9100"}, "metrics-listen"},
		{"metrics on the Pod's address", Config{AuthorizedKeys: "a", HostKey: "h", MetricsListen: "10.0.0.5:9100"}, "only a loopback address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.validate()
			assert.ErrorContains(t, err, tt.want, "err = %v, want one naming %q", err, tt.want)
		})
	}
}
