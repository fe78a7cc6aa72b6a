package framework

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

	"github.com/stretchr/testify/require"
)

func TestHandler(t *testing.T) {
	h := NewHandler(func(ctx context.Context, r Request) (Response, error) {
		switch r.InvocationID {
		case "err":
			return Response{}, errors.New("handler broke")
		case "zero":
			return Response{Body: json.RawMessage(`"x"`)}, nil
		}
		return Response{StatusCode: 201, Body: json.RawMessage(`{"id":"` + r.InvocationID + `"}`)}, nil
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
		{name: "bad json", method: "POST", path: "/invoke", body: `{`, wantStatus: 400, wantBody: `"error":"decode invocation envelope`},
		{name: "no invocation id", method: "POST", path: "/invoke", body: `{}`, wantStatus: 400, wantBody: `field invocationID must not be empty`},
		{name: "invoke wrong method", method: "GET", path: "/invoke", wantStatus: 405, wantBody: `use POST`},
		{name: "unknown path", method: "GET", path: "/nope", wantStatus: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body)))
			if rec.Code != tt.wantStatus || !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Errorf("%s %s = %d %s, want %d containing %s", tt.method, tt.path, rec.Code, rec.Body, tt.wantStatus, tt.wantBody)
			}
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

// serve runs ServeUnix until the test ends.
func serve(t testing.TB, sock, healthPath string, h http.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeUnix(ctx, sock, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeUnix: %v", err)
		}
	})
	c := NewClient(sock, "", healthPath)
	deadline := time.Now().Add(5 * time.Second)
	for c.Health(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("framework did not come up")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestServeUnixAndClient(t *testing.T) {
	sock := shortSocket(t)
	// A stale socket file from a previous run must not stop the server.
	require.NoError(t, os.MkdirAll(filepath.Dir(sock), 0o755))
	ln, err := ListenUnix(sock)
	require.NoError(t, err)
	ln.(interface{ SetUnlinkOnClose(bool) }).SetUnlinkOnClose(false)
	ln.Close()

	serve(t, sock, "/ok", NewHandler(Echo(EchoOptions{}), WithPaths("/run", "/ok")))
	c := NewClient(sock, "/run", "/ok")
	req := Request{InvocationID: "i1", WorkerName: "w", Payload: json.RawMessage(`{"a":1}`), Attributes: map[string]string{"k": "v"}}
	resp, err := c.Invoke(context.Background(), req)
	require.NoError(t, err)
	var back Request
	require.NoError(t, json.Unmarshal(resp.Body, &back))
	if resp.StatusCode != 200 || resp.ContentType != "application/json" || back.InvocationID != "i1" || back.Version != Version || string(back.Payload) != `{"a":1}` || back.Attributes["k"] != "v" {
		t.Errorf("echo = %+v / %+v", resp, back)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o666 {
		t.Errorf("socket mode = %v (%v), want 0666", fi.Mode(), err)
	}
	// Wrong paths: an HTTP error, not an envelope.
	if _, err := NewClient(sock, "/invoke", "").Invoke(context.Background(), req); err == nil || !strings.Contains(err.Error(), "HTTP 404") {
		t.Errorf("invoke on wrong path: err = %v, want HTTP 404", err)
	}
	if err := NewClient(sock, "", "").Health(context.Background()); err == nil {
		t.Error("health on wrong path: no error")
	}
}

func TestListenUnixRefusesNonSocket(t *testing.T) {
	p := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(p, nil, 0o600))
	if _, err := ListenUnix(p); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Errorf("err = %v, want 'is not a socket'", err)
	}
	if _, err := ListenUnix(""); err == nil {
		t.Error("empty path: no error")
	}
}

func TestHealthCheckAndContextCancel(t *testing.T) {
	sock := shortSocket(t)
	healthy := make(chan bool, 1)
	healthy <- false
	started := make(chan struct{})
	h := NewHandler(func(ctx context.Context, r Request) (Response, error) {
		close(started)
		<-ctx.Done()
		return Response{}, ctx.Err()
	}, WithHealth(func(context.Context) error {
		v := <-healthy
		healthy <- v
		if !v {
			return errors.New("model loading")
		}
		return nil
	}))
	go func() { _ = ServeUnix(t.Context(), sock, h) }()
	c := NewClient(sock, "", "")
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := c.Health(context.Background())
		if err != nil && strings.Contains(err.Error(), "HTTP 503: {\"error\":\"model loading\"}") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health err = %v, want HTTP 503 model loading", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	<-healthy
	healthy <- true
	require.NoError(t, c.Health(context.Background()), "healthy")
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	if _, err := c.Invoke(ctx, Request{InvocationID: "x"}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled invoke: err = %v, want context.Canceled", err)
	}
}

func TestEcho(t *testing.T) {
	var exited int
	tests := []struct {
		name      string
		opts      EchoOptions
		attrs     map[string]string
		wantCode  int
		wantError string
		wantExit  int
	}{
		{name: "echo", wantCode: 200},
		{name: "fail option", opts: EchoOptions{Fail: "nope"}, wantCode: 500, wantError: "nope"},
		{name: "fail attribute", attrs: map[string]string{EchoAttrFail: "bad"}, wantCode: 500, wantError: "bad"},
		{name: "bad sleep", attrs: map[string]string{EchoAttrSleep: "x"}, wantCode: 400, wantError: `attribute echo.sleep: "x" is not a duration`},
		{name: "sleep", attrs: map[string]string{EchoAttrSleep: "1ms"}, wantCode: 200},
		{name: "crash", attrs: map[string]string{EchoAttrCrash: "true"}, wantExit: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exited = 0
			tt.opts.Exit = func(c int) { exited = c }
			resp, _ := Echo(tt.opts)(context.Background(), Request{InvocationID: "e", Attributes: tt.attrs})
			if exited != tt.wantExit {
				t.Errorf("exit = %d, want %d", exited, tt.wantExit)
			}
			if tt.wantExit != 0 {
				return
			}
			if resp.StatusCode != tt.wantCode || !strings.HasPrefix(resp.Error, tt.wantError) {
				t.Errorf("resp = %d %q, want %d %q", resp.StatusCode, resp.Error, tt.wantCode, tt.wantError)
			}
		})
	}
}
