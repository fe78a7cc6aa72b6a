package sshserver

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
	tests := []struct {
		name    string
		content string
		want    []ssh.PublicKey
		bad     []int
	}{
		{"empty", "", nil, nil},
		{"comments and blanks", "# team keys\n\n   \n", nil, nil},
		{"two keys", line(a) + " alice@laptop\n" + line(b) + "\n", []ssh.PublicKey{a, b}, nil},
		{"options are accepted", `no-pty,from="10.0.0.1" ` + line(a) + "\n", []ssh.PublicKey{a}, nil},
		{"malformed line is skipped", "ssh-ed25519 notbase64\n" + line(b) + "\n", []ssh.PublicKey{b}, []int{1}},
		{"crlf", line(a) + "\r\n", []ssh.PublicKey{a}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys, bad := ParseAuthorizedKeys([]byte(tt.content))
			require.Len(t, keys, len(tt.want), "got %d keys, want %d", len(keys), len(tt.want))
			for _, k := range tt.want {
				assert.Contains(t, keys, string(k.Marshal()), "key %s missing", ssh.FingerprintSHA256(k))
			}
			assert.True(t, slices.Equal(bad, tt.bad), "bad lines = %v, want %v", bad, tt.bad)
		})
	}
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.validate()
			assert.ErrorContains(t, err, tt.want, "err = %v, want one naming %q", err, tt.want)
		})
	}
}
