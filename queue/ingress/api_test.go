package ingress

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/runplane/runplane/api/serverless/v1"
	"github.com/runplane/runplane/internal/httpjson"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/pool"
)

// TestSpec loads the served document with kin-openapi's loader and
// validates it, then checks what the issue asked of it.
func TestSpec(t *testing.T) {
	b, err := SpecJSON(Config{})
	require.NoError(t, err)
	doc, err := openapi3.NewLoader().LoadFromData(b)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(t.Context()), "kin-openapi validation")

	ids := map[string]bool{}
	for _, op := range operations() {
		o := doc.Paths.Find(op.path).GetOperation(op.method)
		require.NotNil(t, o, "%s %s in the document", op.method, op.path)
		require.NotEmpty(t, o.OperationID)
		require.False(t, ids[o.OperationID], "duplicate operationId %s", o.OperationID)
		ids[o.OperationID] = true
		for code, r := range o.Responses.Map() {
			if code == "204" { // No Content: no body by definition
				assert.Empty(t, r.Value.Content, "%s %s: no body", o.OperationID, code)
				continue
			}
			require.NotEmpty(t, r.Value.Content, "%s %s: a typed body", o.OperationID, code)
			if code >= "400" {
				_, ok := r.Value.Content[httpjson.ProblemContentType]
				assert.True(t, ok, "%s %s: problem details", o.OperationID, code)
			}
		}
	}
	for _, id := range []string{"invokePool", "invokeSeedAlias", "getInvocation", "cancelInvocation", "getPool", "getOpenAPI", "getHealth", "getReadiness"} {
		assert.True(t, ids[id], "operation %s", id)
	}
	// Metrics are not the ingress's: every tenant calls this port.
	assert.Nil(t, doc.Paths.Find("/metrics"), "/metrics in the ingress's document")

	req := doc.Components.Schemas["InvokeRequest"].Value
	timeout := req.Properties["timeoutSeconds"].Value
	require.NotNil(t, timeout.Max)
	assert.Equal(t, 3600.0, *timeout.Max, "the 3600 s maximum")
	assert.Equal(t, 0.0, *timeout.Min)
	assert.Equal(t, []string{"mode"}, req.Required)
	assert.Equal(t, []any{"sync", "async"}, req.Properties["mode"].Value.Enum)
	assert.False(t, req.AdditionalProperties.Has == nil || *req.AdditionalProperties.Has, "unknown fields are refused")

	policy := doc.Components.Schemas["PoolPolicy"].Value
	assert.Contains(t, policy.Properties, "idleTimeoutSeconds")
	assert.NotContains(t, policy.Properties, "idleTimeout", "durations in seconds")
	inv := doc.Components.Schemas["Invocation"].Value
	assert.Contains(t, inv.Required, "state")
	assert.Contains(t, inv.Properties["state"].Value.Enum, "dead_lettered")
	assert.Contains(t, doc.Components.Schemas["Attempt"].Value.Properties["state"].Value.Enum, "handed_back")
	for _, name := range []string{"Problem", "InvocationProblem", "LimitProblem"} {
		assert.Subset(t, doc.Components.Schemas[name].Value.Required, []string{"type", "title", "status", "detail"}, name)
	}

	// A deployment's own limit is what its document says.
	small, err := Spec(Config{MaxTimeoutSeconds: 60})
	require.NoError(t, err)
	assert.Equal(t, 60.0, *small.Components.Schemas["InvokeRequest"].Value.Properties["timeoutSeconds"].Value.Max)
}

// TestSpecRefusesDurations: a time.Duration in an answer would be
// nanoseconds on the wire; the generator refuses it.
func TestSpecRefusesDurations(t *testing.T) {
	err := customize("idleTimeout", reflect.TypeFor[time.Duration](), "", &openapi3.Schema{})
	require.ErrorContains(t, err, "seconds")
}

// TestPoolInfoCoversPool fails when pool.Pool or pool.Policy gains a JSON
// field that v1.Pool does not show (durations as <name>Seconds).
func TestPoolInfoCoversPool(t *testing.T) {
	names := func(t reflect.Type) map[string]bool {
		out := map[string]bool{}
		for _, f := range reflect.VisibleFields(t) {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" || f.Anonymous {
				continue
			}
			if f.Type == reflect.TypeFor[time.Duration]() {
				name += "Seconds"
			}
			out[name] = true
		}
		return out
	}
	info, pol := names(reflect.TypeFor[v1.Pool]()), names(reflect.TypeFor[v1.PoolPolicy]())
	for n := range names(reflect.TypeFor[pool.Pool]()) {
		assert.True(t, info[n], "pool.Pool field %q missing from PoolInfo", n)
	}
	for n := range names(reflect.TypeFor[pool.Policy]()) {
		assert.True(t, pol[n], "pool.Policy field %q missing from PoolPolicy", n)
	}
	// The status shows all but the shared stream's position and the
	// pool's name (the Pool's).
	status, hidden := names(reflect.TypeFor[v1.PoolStatus]()), map[string]bool{"invokeSeq": true, "namespace": true, "pool": true}
	for n := range names(reflect.TypeFor[messages.PoolStatus]()) {
		assert.True(t, status[n] != hidden[n], "messages.PoolStatus field %q: shown %v", n, status[n])
	}
	p := newPoolInfo(pool.Pool{Name: "p", Policy: pool.Policy{IdleTimeout: 90 * time.Second, StartupTimeout: 1500 * time.Millisecond}})
	assert.Equal(t, 90.0, p.Policy.IdleTimeoutSeconds)
	assert.Equal(t, 1.5, p.Policy.StartupTimeoutSeconds)
}

// TestRouting: a wrong method on a known path is 405 with Allow, an
// unknown path 404, both as problem details (before: 404 {"error"} for both).
func TestRouting(t *testing.T) {
	h := (&Server{}).Handler()
	cases := []struct {
		name, method, path string
		code               int
		allow, detail      string
	}{
		{"GET on invoke", http.MethodGet, "/v1/namespaces/a/pools/b/invocations", 405, "POST", "method GET not allowed"},
		{"DELETE an invocation", http.MethodDelete, "/v1/namespaces/a/invocations/x", 405, "GET, HEAD", "use GET or HEAD"},
		{"GET cancel", http.MethodGet, "/v1/namespaces/a/invocations/x/cancel", 405, "POST", "use POST"},
		{"POST healthz", http.MethodPost, "/healthz", 405, "GET, HEAD", ""},
		{"unknown path", http.MethodGet, "/v2/nothing", 404, "", "no route for GET /v2/nothing"},
		{"pre-namespace route", http.MethodPost, "/v1/pools/echo/invocations", 404, "", "addressed within their namespace"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			require.Equal(t, tc.code, rec.Code, rec.Body.String())
			assert.Equal(t, tc.allow, rec.Header().Get("Allow"))
			assert.Equal(t, httpjson.ProblemContentType, rec.Header().Get("Content-Type"))
			var p httpjson.Problem
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
			assert.Equal(t, tc.code, p.Status)
			assert.Equal(t, http.StatusText(tc.code), p.Title)
			assert.Equal(t, tc.path, p.Instance)
			assert.Contains(t, p.Detail, tc.detail)
		})
	}
}

// TestErrorsAreProblems: the ingress answers errors only through
// problem/reject/WriteProblem, never httpjson.Error's {"error"} body.
func TestErrorsAreProblems(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		ast.Inspect(file, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "httpjson" && sel.Sel.Name == "Error" {
					t.Errorf("%s: httpjson.Error: answer errors as problem details (problem, s.reject)", fset.Position(sel.Pos()))
				}
			}
			return true
		})
	}
}
