// Command runplane-invoke makes one synchronous invocation of a pool through
// the queue's ingress and exits 0 only when it succeeded: the chart's
// `helm test` runs it from the runplane image (which has no curl) with its
// ServiceAccount token, so a test proves ingress, activator, scale from
// zero, webhook injection, NATS and the worker sidecar end to end.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/runplane/runplane/internal/cmdline"
	"github.com/runplane/runplane/internal/logging"
)

func main() {
	var o options
	flag.StringVar(&o.queue, "queue-url", "", "base URL of the queue's ingress, e.g. http://runplane-queue.runplane-system.svc (required)")
	flag.StringVar(&o.namespace, "namespace", "", "namespace of the pool (required)")
	flag.StringVar(&o.pool, "pool", "", "pool name (required)")
	flag.StringVar(&o.tokenFile, "token-file", "/var/run/secrets/kubernetes.io/serviceaccount/token", "bearer token of a caller RBAC lets invoke the pool")
	flag.StringVar(&o.payload, "payload", `{"check":"runplane-invoke"}`, "JSON payload")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Minute, "how long the pool may take, a scale from zero included")
	cmdline.Parse(flag.CommandLine, os.Args[1:], logging.Options{})
	body, err := invoke(context.Background(), http.DefaultClient, o)
	if err != nil {
		cmdline.Exit(fmt.Errorf("invocation: %w", err))
	}
	fmt.Println(body)
}

type options struct {
	queue, namespace, pool, tokenFile, payload string
	timeout                                    time.Duration
}

// invoke posts one sync invocation and returns the answer, or an error when
// the answer is not a succeeded invocation.
func invoke(ctx context.Context, client *http.Client, o options) (string, error) {
	if o.queue == "" || o.namespace == "" || o.pool == "" {
		return "", fmt.Errorf("-queue-url, -namespace and -pool are required")
	}
	if !json.Valid([]byte(o.payload)) {
		return "", fmt.Errorf("-payload is not JSON: %q", o.payload)
	}
	token, err := os.ReadFile(o.tokenFile)
	if err != nil {
		return "", fmt.Errorf("reading the token: %w", err)
	}
	req := fmt.Sprintf(`{"mode":"sync","timeoutSeconds":%d,"payload":%s}`, int(o.timeout.Seconds()), o.payload)
	ctx, cancel := context.WithTimeout(ctx, o.timeout+30*time.Second)
	defer cancel()
	url := strings.TrimSuffix(o.queue, "/") + "/v1/namespaces/" + o.namespace + "/pools/" + o.pool + "/invocations"
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(req))
	if err != nil {
		return "", err
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := client.Do(r)
	if err != nil {
		return "", fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("reading the answer: %w", err)
	}
	var rec struct {
		State string `json:"state"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &rec) != nil || rec.State != "succeeded" {
		return "", fmt.Errorf("POST %s: %s: %s", url, resp.Status, b)
	}
	return string(b), nil
}
