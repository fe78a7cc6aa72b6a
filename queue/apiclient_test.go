package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/httpjson"
	"github.com/runplane/runplane/queue/ingress/ingressclient"
)

var updateClient = flag.Bool("update-client", false, "rewrite ingress/ingressclient/client.gen.go from the served OpenAPI document")

// oapiCodegenVersion is stamped into the generated file's header (the
// library reports no version of its own when used from a test).
const oapiCodegenVersion = "v2.8.2"

const clientFile = "ingress/ingressclient/client.gen.go"

// TestGeneratedClient generates a client with oapi-codegen from the
// document a real ingress serves, checks it is the committed
// ingressclient, and runs queue/README.md's calls with it against that
// ingress (a real nats-server, a worker: the real sidecar).
func TestGeneratedClient(t *testing.T) {
	e := newEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	r, err := http.Get(e.base + "/openapi.json")
	require.NoError(t, err)
	var served bytes.Buffer
	_, err = served.ReadFrom(r.Body)
	r.Body.Close()
	require.NoError(t, err)
	doc, err := openapi3.NewLoader().LoadFromData(served.Bytes())
	require.NoError(t, err)
	require.NoError(t, doc.Validate(ctx), "the served document, by kin-openapi's validator")
	v := oapiCodegenVersion
	code, err := codegen.Generate(doc, codegen.Configuration{PackageName: "ingressclient",
		Generate: codegen.GenerateOptions{Client: true, Models: true}, NoVCSVersionOverride: &v})
	require.NoError(t, err)
	if *updateClient {
		require.NoError(t, os.WriteFile(clientFile, []byte(code), 0o644))
	}
	committed, err := os.ReadFile(clientFile)
	require.NoError(t, err)
	require.True(t, string(committed) == code, "%s is not what the served document generates: go test ./queue/ -run TestGeneratedClient -update-client", clientFile)

	// queue/README.md's calls, through the generated client.
	c, err := ingressclient.NewClientWithResponses(e.base)
	require.NoError(t, err)
	e.worker("w1", 4, nil)
	const ns = "default"

	// async: 202 with the ack
	async, err := c.InvokePoolWithResponse(ctx, ns, testPool, ingressclient.InvokeRequest{Mode: ingressclient.InvokeRequestModeAsync, Payload: map[string]any{"prompt": "robot"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, async.StatusCode(), string(async.Body))
	assert.Equal(t, ingressclient.AckStateQueued, async.JSON202.State)
	assert.Equal(t, testPool, async.JSON202.Pool)
	assert.NotContains(t, string(async.Body), "runtime.serverless", "no NATS subject or stream in an answer")

	// sync: 200 with the invocation
	id, timeout, ttl := "job-42", 30, 120
	sync, err := c.InvokePoolWithResponse(ctx, ns, testPool, ingressclient.InvokeRequest{Mode: ingressclient.InvokeRequestModeSync, InvocationID: &id,
		TimeoutSeconds: &timeout, TtlSeconds: &ttl, Headers: &map[string]string{"x-request-id": "abc"},
		Attributes: &map[string]string{"path": "/generate"}, ContentType: ptr("application/json"), Payload: map[string]any{"prompt": "robot"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, sync.StatusCode(), string(sync.Body))
	assert.Equal(t, ingressclient.InvocationStateSucceeded, sync.JSON200.State)
	require.NotNil(t, sync.JSON200.Response)
	assert.Equal(t, 200, sync.JSON200.Response.StatusCode)

	// state and result (the Record may trail the sync answer's fast path)
	e.waitState(id, "succeeded", 10*time.Second)
	got, err := c.GetInvocationWithResponse(ctx, ns, id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, got.StatusCode())
	assert.Equal(t, ingressclient.InvocationStateSucceeded, got.JSON200.State)

	// cancel: 409 when already terminal, naming the state
	late, err := c.CancelInvocationWithResponse(ctx, ns, id)
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, late.StatusCode(), string(late.Body))
	assert.Equal(t, httpjson.ProblemContentType, late.HTTPResponse.Header.Get("Content-Type"))
	assert.Equal(t, ingressclient.InvocationProblemStateSucceeded, late.ApplicationproblemJSON409.State)
	assert.Equal(t, 409, late.ApplicationproblemJSON409.Status)

	// cancel: 200 cancelled for a queued invocation (pool "other" has no worker)
	queuedID := "job-43"
	q, err := c.InvokePoolWithResponse(ctx, ns, "other", ingressclient.InvokeRequest{Mode: ingressclient.InvokeRequestModeAsync, InvocationID: &queuedID})
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, q.StatusCode(), string(q.Body))
	cancelled, err := c.CancelInvocationWithResponse(ctx, ns, queuedID)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, cancelled.StatusCode(), string(cancelled.Body))
	assert.Equal(t, ingressclient.InvocationStateCancelled, cancelled.JSON200.State)

	// the pool: policy (durations in seconds), workers, backlog
	p, err := c.GetPoolWithResponse(ctx, ns, testPool)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, p.StatusCode(), string(p.Body))
	assert.Equal(t, testPool, p.JSON200.Name)
	assert.Equal(t, 300.0, float64(p.JSON200.Policy.IdleTimeoutSeconds), "runplane.io/idle-timeout's default, in seconds")

	// seed alias: namespace and serverlessRequestID name the pool
	alias, err := c.InvokeSeedAliasWithResponse(ctx, ingressclient.InvokeRequest{Mode: ingressclient.InvokeRequestModeAsync, Namespace: ptr(ns),
		ServerlessRequestID: ptr(testPool), Payload: map[string]any{}})
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, alias.StatusCode(), string(alias.Body))
	noNS, err := c.InvokeSeedAliasWithResponse(ctx, ingressclient.InvokeRequest{Mode: ingressclient.InvokeRequestModeAsync, ServerlessRequestID: ptr(testPool)})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, noNS.StatusCode())
	assert.Contains(t, noNS.ApplicationproblemJSON400.Detail, "field namespace is required")

	// errors are problem details
	tooLong := 3601
	bad, err := c.InvokePoolWithResponse(ctx, ns, testPool, ingressclient.InvokeRequest{Mode: ingressclient.InvokeRequestModeSync, TimeoutSeconds: &tooLong})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, bad.StatusCode())
	assert.Contains(t, bad.ApplicationproblemJSON400.Detail, "timeoutSeconds 3601")
	unknown, err := c.GetPoolWithResponse(ctx, ns, "nope")
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, unknown.StatusCode())
	assert.Equal(t, "/v1/namespaces/default/pools/nope", *unknown.ApplicationproblemJSON404.Instance)

	// the service endpoints
	health, err := c.GetHealthWithResponse(ctx)
	require.NoError(t, err)
	assert.Equal(t, "ok", health.JSON200.Status)
	ready, err := c.GetReadinessWithResponse(ctx)
	require.NoError(t, err)
	assert.Equal(t, "ready", ready.JSON200.Status)
	spec, err := c.GetOpenAPIWithResponse(ctx)
	require.NoError(t, err)
	assert.Equal(t, "3.0.3", (*spec.JSON200)["openapi"])

	// a wrong method on a known path: 405 with Allow
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, e.base+"/v1/namespaces/default/invocations/"+id, nil)
	wrong, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	wrong.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, wrong.StatusCode)
	assert.Equal(t, "GET, HEAD", wrong.Header.Get("Allow"))
	var prob httpjson.Problem
	require.NoError(t, json.NewDecoder(bytes.NewReader(late.Body)).Decode(&prob))
	assert.Equal(t, "Conflict", prob.Title)
}

func ptr[T any](v T) *T { return &v }
