package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHandler(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	require.NoError(t, os.WriteFile(ca, nil, 0o644))
	inCluster := map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
	}{
		{name: "in a cluster", args: []string{"--root", dir, "--namespace", "team", "--claim", "data", "--ca-file", ca}, env: inCluster},
		{name: "explicit API server", args: []string{"--root", dir, "--namespace", "team", "--claim", "data", "--api-server", "https://127.0.0.1:6443", "--ca-file", ca}},
		{name: "no API server", args: []string{"--root", dir, "--namespace", "team", "--claim", "data"}, wantErr: "--api-server is required"},
		{name: "no claim", args: []string{"--root", dir, "--namespace", "team", "--ca-file", ca}, env: inCluster, wantErr: "namespace and name are required"},
		{name: "no root", args: []string{"--root", filepath.Join(dir, "missing"), "--namespace", "team", "--claim", "data", "--ca-file", ca}, env: inCluster, wantErr: "opening root"},
		{name: "unknown flag", args: []string{"--insecure"}, wantErr: "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parse(tt.args)
			if err == nil {
				var h http.Handler
				var c interface{ Close() error }
				h, c, err = handler(o, func(k string) string { return tt.env[k] })
				if err == nil {
					defer c.Close()
					// Without a token nothing is served, not even health.
					for _, p := range []string{"/healthz", "/files/", "/archive/"} {
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
						assert.Equal(t, http.StatusUnauthorized, rec.Code, p)
					}
				}
			}
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tt.wantErr)
		})
	}
}
