package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestInvoke(t *testing.T) {
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("tok\n"), 0o600))
	for _, tc := range []struct {
		name, answer, wantErr string
		status                int
	}{
		{name: "succeeded", status: 200, answer: `{"state":"succeeded","response":{"statusCode":200}}`},
		{name: "failed invocation", status: 200, answer: `{"state":"failed"}`, wantErr: `200 OK: {"state":"failed"}`},
		{name: "refused", status: 403, answer: `{"error":"forbidden"}`, wantErr: "403 Forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				require.Equal(t, "/v1/namespaces/ns/pools/p/invocations", r.URL.Path)
				require.Equal(t, "Bearer tok", r.Header.Get("Authorization"))
				b, _ := io.ReadAll(r.Body)
				require.JSONEq(t, `{"mode":"sync","timeoutSeconds":60,"payload":{"a":1}}`, string(b))
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.answer))
			}))
			defer srv.Close()
			out, err := invoke(t.Context(), srv.Client(), options{queue: srv.URL + "/", namespace: "ns", pool: "p", tokenFile: token, payload: `{"a":1}`, timeout: time.Minute})
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.answer, out)
		})
	}
	_, err := invoke(t.Context(), http.DefaultClient, options{queue: "http://x", namespace: "ns", pool: "p", tokenFile: token, payload: "{"})
	require.ErrorContains(t, err, "-payload is not JSON")
}
