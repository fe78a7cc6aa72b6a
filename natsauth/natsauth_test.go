package natsauth

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for k, v := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600))
	}
	return dir
}

func TestFromDirChoosesCredentials(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		opts    int
		wantErr string
	}{
		{name: "empty dir: no auth", files: map[string]string{}, opts: 0},
		{name: "token", files: map[string]string{"token": "s3cret\n"}, opts: 1},
		{name: "user and password", files: map[string]string{"user": "u", "password": "p"}, opts: 1},
		{name: "creds wins", files: map[string]string{"creds": "x", "token": "t"}, opts: 1},
		{name: "user without password", files: map[string]string{"user": "u"}, wantErr: "only one of user and password"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := FromDir(writeDir(t, tt.files))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Len(t, opts, tt.opts)
		})
	}
	_, err := FromDir(filepath.Join(t.TempDir(), "missing"))
	assert.Error(t, err, "a missing directory")
}

// TestFromDirAgainstServer connects to a real nats-server that demands a
// token (or a user and password), with the right and the wrong secret.
func TestFromDirAgainstServer(t *testing.T) {
	tests := []struct {
		name   string
		server server.Options
		files  map[string]string
		ok     bool
	}{
		{"token accepted", server.Options{Authorization: "tok"}, map[string]string{"token": "tok\n"}, true},
		{"wrong token refused", server.Options{Authorization: "tok"}, map[string]string{"token": "nope"}, false},
		{"no credentials refused", server.Options{Authorization: "tok"}, map[string]string{}, false},
		{"user and password accepted", server.Options{Username: "u", Password: "p"}, map[string]string{"user": "u", "password": "p"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.server
			o.Host, o.Port, o.NoLog, o.NoSigs = "127.0.0.1", -1, true, true
			s, err := server.NewServer(&o)
			require.NoError(t, err)
			s.Start()
			defer s.Shutdown()
			require.True(t, s.ReadyForConnections(5*time.Second), "nats-server not ready")
			opts, err := FromDir(writeDir(t, tt.files))
			require.NoError(t, err)
			nc, err := nats.Connect(s.ClientURL(), opts...)
			if nc != nil {
				nc.Close()
			}
			if tt.ok {
				require.NoError(t, err, "connect")
			} else {
				require.Error(t, err, "connect")
			}
		})
	}
}
