package ingress

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/internal/callerauth/callerauthtest"
	"github.com/runplane/runplane/queue/pool"
)

// stalledBody is a request body that sends nothing until released: a
// slow client (an authenticated body may take BodyReadTimeout, 5 min).
// started is closed by its first Read: the handler passed the budget.
type stalledBody struct {
	once    sync.Once
	started chan struct{}
	release <-chan struct{}
}

func (b *stalledBody) Read([]byte) (int, error) {
	b.once.Do(func() { close(b.started) })
	<-b.release
	return 0, errors.New("client gone")
}

// tenants is an offline ingress where each token may invoke its own
// team's pool echo only (mallory team-m, alice team-a, bob team-b), and
// the requests it holds stalled until the test ends.
type tenants struct {
	s       *Server
	h       http.Handler
	release chan struct{}
	wg      sync.WaitGroup
}

func newTenants(t *testing.T) *tenants {
	teams := map[string]string{"mallory": "team-m", "alice": "team-a", "bob": "team-b"}
	auth := callerauthtest.Static{Users: map[string]string{"tok-m": "mallory", "tok-a": "alice", "tok-b": "bob"}, May: func(u string, req callerauth.Request) bool {
		return req.Verb == VerbInvoke && teams[u] == req.Namespace
	}}
	s := offlineServer(auth, pool.Static{"team-m/echo": pool.DefaultPolicy(), "team-a/echo": pool.DefaultPolicy(), "team-b/echo": pool.DefaultPolicy()})
	ts := &tenants{s: s, h: s.Handler(), release: make(chan struct{})}
	t.Cleanup(func() { close(ts.release); ts.wg.Wait() })
	return ts
}

func (ts *tenants) request(token, path string, body io.Reader, contentLength int64) *http.Request {
	r := httptest.NewRequest(http.MethodPost, path, body)
	r.ContentLength = contentLength
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+token)
	return r
}

// stall sends a request whose body stalls, and reports whether its bytes
// are held (its body is being read) or it was answered at once (refused).
func (ts *tenants) stall(token, path string, contentLength int64) bool {
	b := &stalledBody{started: make(chan struct{}), release: ts.release}
	r := ts.request(token, path, b, contentLength)
	answered := make(chan struct{})
	ts.wg.Go(func() { defer close(answered); _ = serve(ts.h, httptest.NewRecorder(), r) })
	select {
	case <-b.started:
		return true
	case <-answered:
		return false
	}
}

// stallAll stalls up to n requests and returns how many are held.
func (ts *tenants) stallAll(n int64, token, path string, contentLength int64) int {
	held := 0
	for range n {
		if !ts.stall(token, path, contentLength) {
			break
		}
		held++
	}
	return held
}

// post sends a whole body (contentLength -1: chunked) and answers.
func (ts *tenants) post(token, path, body string, contentLength int64) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	_ = serve(ts.h, w, ts.request(token, path, io.NopCloser(strings.NewReader(body)), contentLength)) // past the budget it reaches the store, which this server has none of
	return w
}

const smallBody = `{"mode":"async","payload":{}}`

// TestBodyBudgetOneTenantStarvesEveryOther (review of bae2696): a
// seed-alias request that names its pool only in its body is taken after
// authentication only (no namespace is known yet), so those requests
// share one small share of their own; one tenant holding it and its own
// namespace's share leaves the replica room for another tenant. When the
// alias share was a namespace's (96 MiB), one tenant allowed to invoke its
// own pool only held it (384 stalled 256 KiB bodies) and its own, the
// whole replica at almost no bandwidth, and every other tenant's
// invocation with a body got 429 replica_body_bytes.
func TestBodyBudgetOneTenantStarvesEveryOther(t *testing.T) {
	ts := newTenants(t)
	s := ts.s
	held := ts.stallAll(s.cfg.Limits.NamespaceMaxBodyBytes/s.cfg.AliasBodyBytes, "tok-m", "/api/v1/serverless/invocations", s.cfg.AliasBodyBytes)
	require.Equal(t, aliasBodyShare, held, "alias bodies held at once")
	// Its own namespace's share: a chunked body and one more.
	require.True(t, ts.stall("tok-m", "/v1/namespaces/team-m/pools/echo/invocations", -1))
	require.True(t, ts.stall("tok-m", "/v1/namespaces/team-m/pools/echo/invocations", s.cfg.Limits.NamespaceMaxBodyBytes-unknownLengthStep))

	w := ts.post("tok-a", "/v1/namespaces/team-a/pools/echo/invocations", smallBody, int64(len(smallBody)))
	require.NotEqual(t, http.StatusTooManyRequests, w.Code,
		"alice's 29-byte body was refused because one other tenant holds the whole replica's body budget: %s", w.Body.String())
}

// TestAliasQueryNamespaceChargesTheAliasShare (final read): a seed-alias
// request whose query names a namespace but no pool is not authorized for
// that namespace (nothing names a pool yet), so it is charged to the alias
// share, not to the namespace its query names. Charged there, mallory
// filled team-a's share (384 stalled bodies under ?namespace=team-a: alice
// got 429 namespace_body_bytes), or the whole replica through namespaces
// that do not exist (each one a share of its own: everyone got 429
// replica_body_bytes).
func TestAliasQueryNamespaceChargesTheAliasShare(t *testing.T) {
	for name, namespaces := range map[string][]string{
		"another tenant's namespace":   {"team-a"},
		"namespaces that do not exist": {"nope-1", "nope-2"},
	} {
		t.Run(name, func(t *testing.T) {
			ts := newTenants(t)
			s := ts.s
			held := 0
			for _, ns := range namespaces {
				held += ts.stallAll(s.cfg.Limits.NamespaceMaxBodyBytes/s.cfg.AliasBodyBytes+1, "tok-m", "/api/v1/serverless/invocations?namespace="+ns, s.cfg.AliasBodyBytes)
			}
			require.Equal(t, aliasBodyShare, held, "alias bodies held at once")
			w := ts.post("tok-a", "/v1/namespaces/team-a/pools/echo/invocations", smallBody, int64(len(smallBody)))
			require.NotEqual(t, http.StatusTooManyRequests, w.Code, "alice refused: %s", w.Body.String())
		})
	}
}

// TestBodyBudgetChunkedBodyCountedAtItsSize (review of bae2696): a body
// sent without Content-Length (chunked; HTTP/2 clients and streaming
// encoders often send none) is not counted at its ~86 MiB limit before a
// byte is read: counted so, a namespace could have one such request in
// flight at a time (96 MiB share) and the replica two, and a tenant's
// second concurrent 29-byte chunked request was refused.
func TestBodyBudgetChunkedBodyCountedAtItsSize(t *testing.T) {
	ts := newTenants(t)
	require.True(t, ts.stall("tok-a", "/v1/namespaces/team-a/pools/echo/invocations", -1))
	w := ts.post("tok-a", "/v1/namespaces/team-a/pools/echo/invocations", smallBody, -1)
	require.NotEqual(t, http.StatusTooManyRequests, w.Code,
		"a 29-byte body refused: one earlier chunked request of the namespace holds ~86 MiB of its 96 MiB share: %s", w.Body.String())
}

// TestChunkedBodyCountedAsItArrives: a body without a length is counted
// for what has arrived, and refused (429) once it outgrows what its
// namespace has left, not read on past its budget.
func TestChunkedBodyCountedAsItArrives(t *testing.T) {
	ts := newTenants(t)
	s := ts.s
	// All but one step of the namespace's share is held (a body is
	// counted at most at its limit: two bodies).
	for _, n := range []int64{s.cfg.MaxBodyBytes, s.cfg.Limits.NamespaceMaxBodyBytes - s.cfg.MaxBodyBytes - unknownLengthStep} {
		require.True(t, ts.stall("tok-a", "/v1/namespaces/team-a/pools/echo/invocations", n))
	}
	// A chunked body of 2 MiB: its first step fits, its second does not.
	w := ts.post("tok-a", "/v1/namespaces/team-a/pools/echo/invocations", `{"mode":"async","payload":"`+strings.Repeat("x", 2*unknownLengthStep)+`"}`, -1)
	require.Equal(t, http.StatusTooManyRequests, w.Code, "%s", w.Body.String())
	require.Contains(t, w.Body.String(), ReasonNamespaceBodyBytes)
}
