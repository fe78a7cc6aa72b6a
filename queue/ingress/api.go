package ingress

import (
	"fmt"
	"net/http"
	"strings"

	v1 "github.com/runplane/runplane/api/serverless/v1"
	"github.com/runplane/runplane/internal/httpjson"
)

// The API is this table: Handler registers each operation's pattern and
// Spec describes it, with the Go types of its bodies reflected into
// schemas, so routes, answers and the document cannot drift apart. A
// handler that answers another status or type lists it here too: that is
// what the document, and the clients generated from it, know.
type operation struct {
	// method and path: the ServeMux pattern is method + " " + path; path
	// uses the spec's parameter names ({namespace}, {pool}, {id}).
	method, path string
	id           string // operationId
	summary      string
	description  string
	tag          string
	// body is a value of the request body's type (nil: none).
	body      any
	responses []response
	serve     func(*Server) http.HandlerFunc
	// public: no bearer token needed.
	public bool
}

// response is one status of an operation; body is a value of its type
// (nil: none); a Problem type is answered as application/problem+json.
type response struct {
	status      int
	description string
	body        any
	contentType string // default: application/json, or problem+json for problem types
	headers     []string
}

// Problem is the body of every error answer: RFC 9457 problem details.
type Problem = httpjson.Problem

// InvocationProblem is a problem about one invocation: a sync wait that
// ended before the result (504), a cancel of a finished invocation (409).
type InvocationProblem struct {
	httpjson.Problem
	InvocationID string   `json:"invocationID" doc:"the invocation"`
	State        v1.State `json:"state" doc:"its state when the answer was written"`
}

// LimitProblem is a 429 for a full backlog: which limit, its value, where.
type LimitProblem struct {
	httpjson.Problem
	Limit     string `json:"limit,omitempty" doc:"pool_backlog, namespace_backlog, namespace_streams, namespace_stream_bytes, namespace_record_bytes, namespace_body_bytes or replica_body_bytes (absent for a caller-review limit)"`
	Max       int    `json:"max,omitempty" doc:"the limit's value: queued invocations, open streams, or bytes"`
	Namespace string `json:"namespace,omitempty"`
	Pool      string `json:"pool,omitempty"`
}

// Status is the body of the health and readiness answers.
type Status struct {
	Status string `json:"status" doc:"ok (healthz) or ready (readyz)"`
}

func problem(w http.ResponseWriter, r *http.Request, code int, detail string) {
	httpjson.WriteProblem(w, code, httpjson.NewProblem(r, code, detail))
}

// Shared answers of the operations.
var (
	badRequest = response{status: http.StatusBadRequest, body: Problem{},
		description: "a malformed path token (namespace and pool: DNS-1123 labels; invocation ID: 1-128 of A-Z a-z 0-9 _ = -) or body: the detail names the field"}
	unauthorized = response{status: http.StatusUnauthorized, body: Problem{},
		description: "no, or an invalid, bearer token: answered before any of the body is read, and the connection is closed"}
	forbidden   = response{status: http.StatusForbidden, body: Problem{}, description: "RBAC refuses: the detail names the verb, resource, namespace and pool"}
	unavailable = response{status: http.StatusServiceUnavailable, body: Problem{}, description: "NATS or the apiserver is unavailable"}
	tooMany     = response{status: http.StatusTooManyRequests, body: LimitProblem{}, headers: []string{"Retry-After"},
		description: "a backlog limit is reached (the pool's runplane.io/max-backlog or its namespace's; only this namespace is refused), the request bodies in flight on this replica fill its namespace's share or the replica's budget (refused before the body is read), or too many caller reviews"}
)

func invokeResponses(notFound string) []response {
	return []response{
		{status: http.StatusOK, body: v1.Invocation{}, description: "sync: the terminal invocation (its response is the worker's answer)"},
		{status: http.StatusAccepted, body: v1.Ack{}, description: "async: accepted, with the JetStream ack"},
		badRequest, unauthorized, forbidden,
		{status: http.StatusNotFound, body: Problem{}, description: notFound},
		{status: http.StatusConflict, body: Problem{}, description: "the invocation ID is taken in the namespace (by another pool, not named), or was accepted with another request " +
			"(payload, headers, attributes or contentType differ), or several Deployments of the namespace claim the pool (the detail names them)"},
		{status: http.StatusRequestTimeout, body: Problem{}, description: "the body did not arrive within the ingress's body read timeout"},
		{status: http.StatusRequestEntityTooLarge, body: Problem{}, description: "the body is over the ingress's limit (on the seed alias, a body that names its pool " +
			"only inside it has a smaller one: it is read before the caller is authorized)"},
		tooMany, unavailable,
		{status: http.StatusGatewayTimeout, body: InvocationProblem{}, description: "sync: no result within timeoutSeconds; the invocation stays pollable"},
	}
}

func operations() []operation {
	return []operation{
		{method: http.MethodPost, path: "/v1/namespaces/{namespace}/pools/{pool}/invocations", id: "invokePool", tag: "invocations",
			summary: "Enqueue an invocation of a pool",
			description: "sync waits up to timeoutSeconds for the result; async answers with the ack. A client-chosen invocationID makes a re-post idempotent. " +
				"With Accept: text/event-stream or \"stream\": true the answer is 200 text/event-stream as streamInvocation's (mode defaults to async).",
			body: v1.InvokeRequest{}, responses: invokeResponses("no Deployment of the namespace is labelled runplane.io/pool=<pool>"),
			serve: func(s *Server) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					s.handleInvoke(w, r, r.PathValue("namespace"), r.PathValue("pool"), false)
				}
			}},
		{method: http.MethodPost, path: "/api/v1/serverless/invocations", id: "invokeSeedAlias", tag: "invocations",
			summary: "Enqueue an invocation (seed alias)",
			description: "The seed's route: the namespace is named by namespace (required) and the pool by serverlessRequestID (required), in the body or as " +
				"query parameters (?namespace=…&serverlessRequestID=…); otherwise as invokePool. A pool named in the query is authorized before the body is " +
				"read, and the body may be as large as invokePool's; one named only in the body is read first, within a smaller limit (256 KiB by default; 413 beyond).",
			body: v1.InvokeRequest{}, responses: invokeResponses("no Deployment of the namespace is labelled runplane.io/pool=<serverlessRequestID>"),
			serve: func(s *Server) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) { s.handleInvoke(w, r, "", "", true) }
			}},
		{method: http.MethodGet, path: "/v1/namespaces/{namespace}/invocations/{id}", id: "getInvocation", tag: "invocations",
			summary: "An invocation's state and result",
			responses: []response{
				{status: http.StatusOK, body: v1.Invocation{}, description: "the invocation"},
				badRequest, unauthorized, forbidden,
				{status: http.StatusNotFound, body: Problem{}, description: "no such invocation in this namespace (an ID of another namespace included)"},
				unavailable,
			},
			serve: func(s *Server) http.HandlerFunc { return s.handleGet }},
		{method: http.MethodGet, path: "/v1/namespaces/{namespace}/invocations/{id}/stream", id: "streamInvocation", tag: "invocations",
			summary:     "An invocation's output as server-sent events, resumable",
			description: streamDescription,
			responses: []response{
				{status: http.StatusOK, body: "", contentType: "text/event-stream", description: "the events: invocation, then chunk (id: its sequence) and attempt, then result (the terminal invocation)"},
				{status: http.StatusNoContent, description: "Last-Event-ID result: the client had the result event, the stream is over (an EventSource stops reconnecting)"},
				badRequest, unauthorized, forbidden,
				{status: http.StatusNotFound, body: Problem{}, description: "no such invocation in this namespace (an ID of another namespace included)"},
				unavailable,
			},
			serve: func(s *Server) http.HandlerFunc { return s.handleStream }},
		{method: http.MethodPost, path: "/v1/namespaces/{namespace}/invocations/{id}/cancel", id: "cancelInvocation", tag: "invocations",
			summary:     "Cancel an invocation",
			description: "A queued invocation becomes cancelled at once; a running one's worker is sent a cancel, which reaches the framework as a closed connection.",
			responses: []response{
				{status: http.StatusOK, body: v1.Invocation{}, description: "the invocation, now cancelled"},
				badRequest, unauthorized, forbidden,
				{status: http.StatusNotFound, body: Problem{}, description: "no such invocation in this namespace"},
				{status: http.StatusConflict, body: InvocationProblem{}, description: "the invocation already finished: state names how"},
				unavailable,
			},
			serve: func(s *Server) http.HandlerFunc { return s.handleCancel }},
		{method: http.MethodGet, path: "/v1/namespaces/{namespace}/callback-signing-key", id: "getCallbackSigningKey", tag: "callbacks",
			summary: "The namespace's completion-callback signing key",
			description: "Callbacks POST the terminal invocation with Runplane-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 over \"<t>.<body>\"> under this key " +
				"(verify it and refuse old timestamps; the header may carry several v1 MACs: accept when one verifies); Runplane-Delivery names the delivery for deduplication. " +
				"The key follows the namespace's UID, and keyID names it: a namespace deleted and made again under its name has another. Needs RBAC get on pools/callbacksigningkey in the namespace.",
			responses: []response{
				{status: http.StatusOK, body: v1.SigningKey{}, description: "the key"},
				badRequest, unauthorized, forbidden,
				{status: http.StatusNotFound, body: Problem{}, description: "callbacks are not enabled, or no such namespace"},
				unavailable,
			},
			serve: func(s *Server) http.HandlerFunc { return s.handleSigningKey }},
		{method: http.MethodGet, path: "/v1/namespaces/{namespace}/pools/{pool}", id: "getPool", tag: "pools",
			summary: "A pool's policy, workers, backlog and in-flight count",
			responses: []response{
				{status: http.StatusOK, body: v1.Pool{}, description: "the pool; conflict names the Deployments when several claim it"},
				badRequest, unauthorized, forbidden,
				{status: http.StatusNotFound, body: Problem{}, description: "no Deployment of the namespace is labelled runplane.io/pool=<pool>"},
				unavailable,
			},
			serve: func(s *Server) http.HandlerFunc { return s.handlePool }},
		{method: http.MethodGet, path: "/openapi.json", id: "getOpenAPI", tag: "service", public: true,
			summary:   "This document",
			responses: []response{{status: http.StatusOK, body: map[string]any{}, description: "the OpenAPI 3.0 document, generated from the Go types"}},
			serve: func(s *Server) http.HandlerFunc {
				return func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					_, _ = w.Write(s.spec)
				}
			}},
		{method: http.MethodGet, path: "/healthz", id: "getHealth", tag: "service", public: true,
			summary:   "Liveness",
			responses: []response{{status: http.StatusOK, body: Status{}, description: "alive"}},
			serve: func(s *Server) http.HandlerFunc {
				return func(w http.ResponseWriter, _ *http.Request) { httpjson.Write(w, http.StatusOK, Status{Status: "ok"}) }
			}},
		{method: http.MethodGet, path: "/readyz", id: "getReadiness", tag: "service", public: true,
			summary: "Readiness: NATS connected and the pool list synced",
			responses: []response{
				{status: http.StatusOK, body: Status{}, description: "ready"},
				{status: http.StatusServiceUnavailable, body: Problem{}, description: "not ready: the detail says why"},
			},
			serve: func(s *Server) http.HandlerFunc { return s.handleReady }},
	}
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	switch {
	case !s.cfg.NC.IsConnected():
		problem(w, r, http.StatusServiceUnavailable, "NATS is not connected")
	case !s.cfg.Pools.Synced():
		problem(w, r, http.StatusServiceUnavailable, "pool list not synced")
	case !s.counted():
		problem(w, r, http.StatusServiceUnavailable, "the namespaces' shares of the store are being counted from the Records bucket")
	default:
		httpjson.Write(w, http.StatusOK, Status{Status: "ready"})
	}
}

// Handler returns the HTTP API: the operations' routes, and problem
// details for the rest (404, and 405 with Allow for a known path).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, op := range operations() {
		h := op.serve(s)
		if !op.public {
			h = s.authenticated(h)
		}
		mux.HandleFunc(op.method+" "+op.path, h)
	}
	// The routes before pools were namespaced: a pointer to the new ones.
	for _, old := range []string{"/v1/pools/", "/v1/invocations/"} {
		mux.HandleFunc(old, func(w http.ResponseWriter, r *http.Request) {
			problem(w, r, http.StatusNotFound, fmt.Sprintf("no route for %s %s: pools and invocations are addressed within their namespace, "+
				"/v1/namespaces/{namespace}/pools/{pool}[/invocations] and /v1/namespaces/{namespace}/invocations/{id}[/cancel]", r.Method, r.URL.Path))
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		// No route: the mux knows whether the path exists with other
		// methods (405 and Allow) or not (404); its answer is plain text,
		// ours a problem.
		rec := &statusOnly{header: http.Header{}}
		mux.ServeHTTP(rec, r)
		if rec.code == http.StatusMethodNotAllowed {
			allow := rec.header.Get("Allow")
			w.Header().Set("Allow", allow)
			problem(w, r, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s: use %s", r.Method, r.URL.Path,
				strings.Join(strings.Split(allow, ", "), " or ")))
			return
		}
		problem(w, r, http.StatusNotFound, fmt.Sprintf("no route for %s %s (the API is described at /openapi.json)", r.Method, r.URL.Path))
	})
}

// statusOnly records the status and headers the mux's own 404/405 answer
// sets, and drops its body.
type statusOnly struct {
	header http.Header
	code   int
}

func (s *statusOnly) Header() http.Header         { return s.header }
func (s *statusOnly) Write(b []byte) (int, error) { return len(b), nil }
func (s *statusOnly) WriteHeader(code int)        { s.code = code }
