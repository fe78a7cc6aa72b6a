package queue_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/queue/activator"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
)

// TestInputValidation: malformed path tokens get 400 on every route,
// well-formed unknown ones 404; a body must be one JSON object of known
// fields with bounded timeoutSeconds and ttlSeconds.
func TestInputValidation(t *testing.T) {
	e := newEnv(t, nil)
	long := strings.Repeat("x", 129)
	cases := []struct {
		name, method, path string
		body               any
		code               int
		errHas             string
	}{
		{"invoke: namespace not a DNS label", "POST", "/v1/namespaces/Team_A/pools/echo/invocations", `{"mode":"async"}`, 400, "DNS-1123"},
		{"invoke: namespace too long", "POST", "/v1/namespaces/" + strings.Repeat("a", 64) + "/pools/echo/invocations", `{"mode":"async"}`, 400, "namespace"},
		{"invoke: pool not a DNS label", "POST", "/v1/namespaces/default/pools/Echo/invocations", `{"mode":"async"}`, 400, "pool"},
		{"invoke: pool with a dot", "POST", "/v1/namespaces/default/pools/e.cho/invocations", `{"mode":"async"}`, 400, "pool"},
		{"invoke: unknown pool", "POST", "/v1/namespaces/default/pools/nope/invocations", `{"mode":"async"}`, 404, "unknown pool"},
		{"invoke: malformed invocationID", "POST", "/v1/namespaces/default/pools/echo/invocations", `{"mode":"async","invocationID":"a.b"}`, 400, "invocationID"},
		{"invoke: invocationID too long", "POST", "/v1/namespaces/default/pools/echo/invocations", `{"mode":"async","invocationID":"` + long + `"}`, 400, "invocationID"},
		{"invoke: trailing JSON", "POST", "/v1/namespaces/default/pools/echo/invocations", `{"mode":"async"}{"mode":"sync"}`, 400, "trailing"},
		{"invoke: trailing garbage", "POST", "/v1/namespaces/default/pools/echo/invocations", `{"mode":"async"} x`, 400, "after the JSON object"},
		{"invoke: malformed JSON", "POST", "/v1/namespaces/default/pools/echo/invocations", `{"mode":}`, 400, "invalid JSON body: invalid character '}' looking for the beginning of a value at offset 8"},
		{"invoke: unknown field", "POST", "/v1/namespaces/default/pools/echo/invocations", `{"mode":"async","priority":9}`, 400, `"priority"`},
		{"invoke: ttlSeconds over max", "POST", "/v1/namespaces/default/pools/echo/invocations", `{"mode":"async","ttlSeconds":86401}`, 400, "ttlSeconds"},
		{"invoke: ttlSeconds negative", "POST", "/v1/namespaces/default/pools/echo/invocations", `{"mode":"async","ttlSeconds":-1}`, 400, "ttlSeconds"},
		{"invoke: timeoutSeconds over max", "POST", "/v1/namespaces/default/pools/echo/invocations", `{"mode":"async","timeoutSeconds":3601}`, 400, "timeoutSeconds"},
		{"invoke: ttlSeconds at max", "POST", "/v1/namespaces/default/pools/echo/invocations", `{"mode":"async","ttlSeconds":3000}`, 202, ""},
		{"alias: namespace not a DNS label", "POST", "/api/v1/serverless/invocations", `{"mode":"async","namespace":"A","serverlessRequestID":"echo"}`, 400, "namespace"},
		{"alias: pool not a DNS label", "POST", "/api/v1/serverless/invocations", `{"mode":"async","namespace":"default","serverlessRequestID":"e*"}`, 400, "pool"},
		{"alias: trailing JSON", "POST", "/api/v1/serverless/invocations", `{"mode":"async","namespace":"default","serverlessRequestID":"echo"} {}`, 400, "trailing"},
		{"get: malformed ID", "GET", "/v1/namespaces/default/invocations/a.b", nil, 400, "invocation ID"},
		{"get: ID too long", "GET", "/v1/namespaces/default/invocations/" + long, nil, 400, "invocation ID"},
		{"get: namespace not a DNS label", "GET", "/v1/namespaces/Default/invocations/x", nil, 400, "namespace"},
		{"get: unknown ID", "GET", "/v1/namespaces/default/invocations/missing", nil, 404, "not found"},
		{"cancel: malformed ID", "POST", "/v1/namespaces/default/invocations/a%20b/cancel", nil, 400, "invocation ID"},
		{"cancel: namespace not a DNS label", "POST", "/v1/namespaces/a_b/invocations/x/cancel", nil, 400, "namespace"},
		{"cancel: unknown ID", "POST", "/v1/namespaces/default/invocations/missing/cancel", nil, 404, "not found"},
		{"pool: malformed name", "GET", "/v1/namespaces/default/pools/-echo", nil, 400, "pool"},
		{"pool: namespace not a DNS label", "GET", "/v1/namespaces/DEFAULT/pools/echo", nil, 400, "namespace"},
		{"pool: unknown", "GET", "/v1/namespaces/default/pools/nope", nil, 404, "unknown pool"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(tc.method, tc.path, tc.body)
			require.Equal(t, tc.code, r.code, "%s", r.raw)
			if tc.errHas != "" {
				assert.Contains(t, r.body["error"], tc.errHas)
			}
		})
	}
	// The API description is JSON (e.do requires it).
	require.Equal(t, 200, e.do("GET", "/openapi.json", nil).code)
}

// TestRepostDifferentPayload: a re-post of an invocation ID with the same
// request is answered as a duplicate (also with the payload's keys
// reordered, or another timeout), with another payload, header, attribute
// or content type it gets 409 and nothing is enqueued.
func TestRepostDifferentPayload(t *testing.T) {
	e := newEnv(t, nil)
	first := `{"mode":"async","invocationID":"job-1","payload":{"a":1,"b":[1,2]},"headers":{"h":"v"},"attributes":{"path":"/x"}}`
	r := e.do("POST", "/v1/namespaces/default/pools/echo/invocations", first)
	require.Equal(t, 202, r.code, "%s", r.raw)
	require.Equal(t, false, r.body["duplicate"])
	cases := []struct {
		name, body string
		code       int
	}{
		{"same request", first, 202},
		{"same request, keys reordered", `{"mode":"async","invocationID":"job-1","attributes":{"path":"/x"},"headers":{"h":"v"},"payload":{"b":[1,2], "a":1}}`, 202},
		{"other payload", `{"mode":"async","invocationID":"job-1","payload":{"a":2,"b":[1,2]},"headers":{"h":"v"},"attributes":{"path":"/x"}}`, 409},
		{"number spelled otherwise", `{"mode":"async","invocationID":"job-1","payload":{"a":1.0,"b":[1,2]},"headers":{"h":"v"},"attributes":{"path":"/x"}}`, 409},
		{"other header", `{"mode":"async","invocationID":"job-1","payload":{"a":1,"b":[1,2]},"headers":{"h":"w"},"attributes":{"path":"/x"}}`, 409},
		{"other attribute", `{"mode":"async","invocationID":"job-1","payload":{"a":1,"b":[1,2]},"headers":{"h":"v"},"attributes":{"path":"/y"}}`, 409},
		{"other content type", `{"mode":"async","invocationID":"job-1","payload":{"a":1,"b":[1,2]},"headers":{"h":"v"},"attributes":{"path":"/x"},"contentType":"application/vnd.api+json"}`, 409},
		{"other timeout and TTL: same request", `{"mode":"async","invocationID":"job-1","payload":{"a":1,"b":[1,2]},"headers":{"h":"v"},"attributes":{"path":"/x"},"ttlSeconds":60,"timeoutSeconds":5}`, 202},
		{"no payload", `{"mode":"async","invocationID":"job-1","headers":{"h":"v"},"attributes":{"path":"/x"}}`, 409},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("POST", "/v1/namespaces/default/pools/echo/invocations", tc.body)
			require.Equal(t, tc.code, r.code, "%s", r.raw)
			if tc.code == 202 {
				assert.Equal(t, true, r.body["duplicate"])
			} else {
				assert.Contains(t, r.body["error"], "another request")
			}
		})
	}
	// The worker runs the first request, once.
	e.worker("w", 1, nil)
	rec := e.waitState("job-1", messages.StateSucceeded, 10*time.Second)
	assert.JSONEq(t, `{"a":1,"b":[1,2]}`, string(rec.Response.Body))
	assert.True(t, strings.HasPrefix(e.stored("job-1").RequestHash, "sha256:"), "the stored Record keeps the hash (no answer shows it)")
	e.quiet("w")
	assert.Len(t, e.log.Runs("job-1"), 1)
}

// TestHeartbeatTimeoutRefusedAtStart: a heartbeat timeout that a single
// late heartbeat could exceed is refused before anything starts, naming
// both values and the least timeout allowed.
func TestHeartbeatTimeoutRefusedAtStart(t *testing.T) {
	cases := []struct {
		timeout, interval time.Duration
		errHas            string
	}{
		{3 * time.Second, 5 * time.Second, "heartbeat timeout 3s is below 3× the workers' heartbeat interval 5s (15s)"},
		{14 * time.Second, 5 * time.Second, "at least 15s"},
		{0, 6 * time.Second, "heartbeat timeout 15s"}, // the default timeout
		{15 * time.Second, 5 * time.Second, ""},
		{time.Second, 0, ""}, // interval unknown: not checked
	}
	for _, tc := range cases {
		w := activator.Workers{HeartbeatTimeout: metav1.Duration{Duration: tc.timeout}, HeartbeatInterval: metav1.Duration{Duration: tc.interval}}
		d := w
		d.Default()
		err := d.Validate()
		if tc.errHas == "" {
			require.NoError(t, err, "%s / %s", tc.timeout, tc.interval)
			continue
		}
		require.ErrorContains(t, err, tc.errHas)
		// queue.Run refuses it before it connects anywhere.
		err = queue.Run(t.Context(), queue.Config{NATS: queue.NATS{URL: "nats://127.0.0.1:1"}, Decisions: activator.Decisions{Workers: w}})
		require.ErrorContains(t, err, tc.errHas)
	}
}
