package framework_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/sidecar/frameworkclient"
)

func TestHandler(t *testing.T) {
	h := framework.NewHandler(func(ctx context.Context, r framework.Request) (framework.Response, error) {
		switch r.InvocationID {
		case "err":
			return framework.Response{}, errors.New("handler broke")
		case "zero":
			return framework.Response{Body: json.RawMessage(`"x"`)}, nil
		case "not-json":
			return framework.Response{Body: json.RawMessage(`{"a":` + strings.Repeat("1", 8<<10))}, nil
		case "big":
			return framework.Response{Body: json.RawMessage(`{ "html": "<&>", "pad": "` + strings.Repeat("x", 8<<10) + `" }`)}, nil
		}
		return framework.Response{StatusCode: 201, Body: json.RawMessage(`{"id":"` + r.InvocationID + `"}`)}, nil
	})
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		wantBody   string // substring
	}{
		{name: "health", method: "GET", path: "/healthz", wantStatus: 200, wantBody: `"status":"ok"`},
		{name: "health wrong method", method: "POST", path: "/healthz", wantStatus: 405, wantBody: `use GET`},
		{name: "invoke", method: "POST", path: "/invoke", body: `{"invocationID":"a"}`, wantStatus: 200, wantBody: `"statusCode":201,"body":{"id":"a"}`},
		{name: "invoke default status", method: "POST", path: "/invoke", body: `{"invocationID":"zero"}`, wantStatus: 200, wantBody: `"statusCode":200`},
		{name: "handler error", method: "POST", path: "/invoke", body: `{"invocationID":"err"}`, wantStatus: 200, wantBody: `"statusCode":500,"error":"handler broke"`},
		// It was a 200 with an empty body: the sidecar could only say it
		// could not decode it.
		{name: "handler's body not JSON", method: "POST", path: "/invoke", body: `{"invocationID":"not-json"}`, wantStatus: 200,
			wantBody: `{"statusCode":500,"error":"the handler's response body is not valid JSON"}`},
		{name: "a big body as it is", method: "POST", path: "/invoke", body: `{"invocationID":"big"}`, wantStatus: 200,
			wantBody: `{"statusCode":200,"body":{ "html": "<&>", "pad": "` + strings.Repeat("x", 8<<10) + `" }}`},
		{name: "bad json", method: "POST", path: "/invoke", body: `{`, wantStatus: 400, wantBody: `"error":"decode invocation envelope`},
		{name: "no invocation id", method: "POST", path: "/invoke", body: `{}`, wantStatus: 400, wantBody: `field invocationID must not be empty`},
		{name: "invoke wrong method", method: "GET", path: "/invoke", wantStatus: 405, wantBody: `use POST`},
		{name: "unknown path", method: "GET", path: "/nope", wantStatus: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body)))
			assert.Equal(t, tt.wantStatus, rec.Code, "%s %s", tt.method, tt.path)
			assert.Contains(t, rec.Body.String(), tt.wantBody, "%s %s", tt.method, tt.path)
		})
	}
}

func shortSocket(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rpfw")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "sub", "framework.sock")
}

// serve runs framework.ServeUnix until the test ends.
func serve(t testing.TB, sock, healthPath string, h http.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- framework.ServeUnix(ctx, sock, h) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done, "framework.ServeUnix")
	})
	c := frameworkclient.NewClient(sock, "", healthPath)
	require.Eventually(t, func() bool { return c.Health(context.Background()) == nil }, 5*time.Second, 10*time.Millisecond, "framework did not come up")
}

func TestServeUnixAndClient(t *testing.T) {
	sock := shortSocket(t)
	// A stale socket file from a previous run must not stop the server.
	require.NoError(t, os.MkdirAll(filepath.Dir(sock), 0o755))
	ln, err := framework.ListenUnix(sock)
	require.NoError(t, err)
	ln.(interface{ SetUnlinkOnClose(bool) }).SetUnlinkOnClose(false)
	ln.Close()

	serve(t, sock, "/ok", framework.NewHandler(framework.Echo(framework.EchoOptions{}), framework.WithPaths("/run", "/ok")))
	c := frameworkclient.NewClient(sock, "/run", "/ok")
	req := framework.Request{InvocationID: "i1", WorkerName: "w", Payload: json.RawMessage(`{"a":1}`), Attributes: map[string]string{"k": "v"}}
	resp, err := c.Invoke(context.Background(), req)
	require.NoError(t, err)
	var back framework.Request
	require.NoError(t, json.Unmarshal(resp.Body, &back))
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "application/json", resp.ContentType)
	assert.Equal(t, "i1", back.InvocationID)
	assert.Equal(t, framework.Version, back.Version)
	assert.JSONEq(t, `{"a":1}`, string(back.Payload))
	assert.Equal(t, "v", back.Attributes["k"])
	fi, err := os.Stat(sock)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o666), fi.Mode().Perm(), "socket mode")
	// Wrong paths: an HTTP error, not an envelope.
	_, err = frameworkclient.NewClient(sock, "/invoke", "").Invoke(context.Background(), req)
	assert.ErrorContains(t, err, "HTTP 404", "invoke on wrong path")
	assert.Error(t, frameworkclient.NewClient(sock, "", "").Health(context.Background()), "health on wrong path")
}

// TestClientSendsThePayloadAsItIs: the sidecar's client writes the payload
// into the envelope byte for byte (the queue validated it when it took
// it), not scanned, compacted and HTML-escaped once more by encoding/json.
func TestClientSendsThePayloadAsItIs(t *testing.T) {
	sock := shortSocket(t)
	got := make(chan []byte, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/run", func(w http.ResponseWriter, r *http.Request) {
		var env struct {
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.NewDecoder(r.Body).Decode(&env); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- env.Payload
		_, _ = w.Write([]byte(`{"statusCode":200}`))
	})
	serve(t, sock, "/ok", mux)
	payload := `{ "html": "<&>",  "n": 1.50 }`
	_, err := frameworkclient.NewClient(sock, "/run", "/ok").Invoke(context.Background(), framework.Request{InvocationID: "i1", Payload: json.RawMessage(payload)})
	require.NoError(t, err)
	assert.Equal(t, payload, string(<-got))
}

func TestListenUnixRefusesNonSocket(t *testing.T) {
	p := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(p, nil, 0o600))
	_, err := framework.ListenUnix(p)
	assert.ErrorContains(t, err, "is not a socket")
	_, err = framework.ListenUnix("")
	assert.Error(t, err, "empty path")
}

func TestHealthCheckAndContextCancel(t *testing.T) {
	sock := shortSocket(t)
	healthy := make(chan bool, 1)
	healthy <- false
	started := make(chan struct{})
	h := framework.NewHandler(func(ctx context.Context, r framework.Request) (framework.Response, error) {
		close(started)
		<-ctx.Done()
		return framework.Response{}, ctx.Err()
	}, framework.WithHealth(func(context.Context) error {
		v := <-healthy
		healthy <- v
		if !v {
			return errors.New("model loading")
		}
		return nil
	}))
	go func() { _ = framework.ServeUnix(t.Context(), sock, h) }()
	c := frameworkclient.NewClient(sock, "", "")
	require.EventuallyWithT(t, func(c2 *assert.CollectT) {
		assert.ErrorContains(c2, c.Health(context.Background()), "HTTP 503: {\"error\":\"model loading\"}")
	}, 5*time.Second, 10*time.Millisecond, "health reports the model loading")
	<-healthy
	healthy <- true
	require.NoError(t, c.Health(context.Background()), "healthy")
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	_, err := c.Invoke(ctx, framework.Request{InvocationID: "x"})
	assert.ErrorIs(t, err, context.Canceled, "cancelled invoke")
}

func TestEcho(t *testing.T) {
	var exited int
	tests := []struct {
		name      string
		opts      framework.EchoOptions
		attrs     map[string]string
		wantCode  int
		wantError string
		wantExit  int
	}{
		{name: "echo", wantCode: 200},
		{name: "fail option", opts: framework.EchoOptions{Fail: "nope"}, wantCode: 500, wantError: "nope"},
		{name: "fail attribute", attrs: map[string]string{framework.EchoAttrFail: "bad"}, wantCode: 500, wantError: "bad"},
		{name: "bad sleep", attrs: map[string]string{framework.EchoAttrSleep: "x"}, wantCode: 400, wantError: `attribute echo.sleep: "x" is not a duration`},
		{name: "sleep", attrs: map[string]string{framework.EchoAttrSleep: "1ms"}, wantCode: 200},
		{name: "crash", attrs: map[string]string{framework.EchoAttrCrash: "true"}, wantExit: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exited = 0
			tt.opts.Exit = func(c int) { exited = c }
			resp, _ := framework.Echo(tt.opts)(context.Background(), framework.Request{InvocationID: "e", Attributes: tt.attrs})
			assert.Equal(t, tt.wantExit, exited, "exit code")
			if tt.wantExit != 0 {
				return
			}
			assert.Equal(t, tt.wantCode, resp.StatusCode)
			assert.True(t, strings.HasPrefix(resp.Error, tt.wantError), "error %q, want prefix %q", resp.Error, tt.wantError)
		})
	}
}
