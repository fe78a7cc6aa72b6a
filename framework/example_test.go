package framework_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/sidecar/frameworkclient"
)

// A framework answers invocations over a unix socket; the sidecar calls it
// with a Client. Here both ends run in one process.
func Example() {
	dir, err := os.MkdirTemp("", "framework-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "framework.sock")

	// The framework side: a handler for the contract, served on the socket.
	greet := framework.NewHandler(func(ctx context.Context, req framework.Request) (framework.Response, error) {
		body, err := json.Marshal("hello " + string(req.Payload))
		if err != nil {
			return framework.Response{}, err
		}
		return framework.Response{StatusCode: http.StatusOK, ContentType: "application/json", Body: body}, nil
	})
	ln, err := framework.ListenUnix(socket)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: greet}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	// The sidecar side: check health, then invoke.
	ctx := context.Background()
	client := frameworkclient.NewClient(socket, "", "")
	if err := client.Health(ctx); err != nil {
		log.Fatal(err)
	}
	resp, err := client.Invoke(ctx, framework.Request{InvocationID: "inv-1", Payload: json.RawMessage(`"world"`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.StatusCode, string(resp.Body))
	// Output: 200 "hello \"world\""
}

// The main function of a framework written in Go: serve the contract on the
// socket the webhook configured until the Pod is stopped.
func ExampleServeUnix() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	h := framework.NewHandler(func(ctx context.Context, req framework.Request) (framework.Response, error) {
		return framework.Response{Body: req.Payload}, nil // statusCode 0 is answered as 200
	})
	if err := framework.ServeUnix(ctx, os.Getenv(api.EnvFrameworkSocket), h); err != nil {
		log.Fatal(err)
	}
}

// A failing handler's error becomes a 500 envelope the sidecar reports as a
// failed invocation; the HTTP status stays 200.
func ExampleNewHandler() {
	h := framework.NewHandler(func(context.Context, framework.Request) (framework.Response, error) {
		return framework.Response{}, fmt.Errorf("model not loaded")
	}, framework.WithHealth(func(context.Context) error { return fmt.Errorf("warming up") }))

	health := httptest.NewRecorder()
	h.ServeHTTP(health, httptest.NewRequest(http.MethodGet, framework.DefaultHealthPath, nil))
	fmt.Print(health.Code, " ", health.Body.String())

	invoke := httptest.NewRecorder()
	h.ServeHTTP(invoke, httptest.NewRequest(http.MethodPost, framework.DefaultInvokePath, strings.NewReader(`{"invocationID":"inv-1"}`)))
	fmt.Print(invoke.Code, " ", invoke.Body.String())
	// Output:
	// 503 {"error":"warming up"}
	// 200 {"statusCode":500,"error":"model not loaded"}
}

// Attributes steer the echo framework, the reference the sidecar is tested
// against.
func ExampleEcho() {
	echo := framework.Echo(framework.EchoOptions{})
	resp, err := echo(context.Background(), framework.Request{InvocationID: "inv-1", Attributes: map[string]string{framework.EchoAttrFail: "boom"}})
	fmt.Println(resp.StatusCode, resp.Error, err)
	// Output: 500 boom <nil>
}
