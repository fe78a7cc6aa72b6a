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

// TestBodyBudgetOneTenantStarvesEveryOther (review of bae2696): the README
// says the namespace share is half the replica's budget "so one tenant
// never takes the replica". But a seed-alias request that names its pool
// only in its body is counted in one share common to all such requests,
// and it is taken after authentication only (no authorization: the
// namespace is not known yet). So one tenant, allowed to invoke its own
// pool only, holds the alias share (384 stalled 256 KiB alias bodies) and
// its namespace's share (one chunked body, counted at the body limit, and
// one more) — the whole replica at almost no bandwidth — and every other
// tenant's invocation with a body gets 429 replica_body_bytes.
func TestBodyBudgetOneTenantStarvesEveryOther(t *testing.T) {
	auth := callerauthtest.Static{Users: map[string]string{"tok-m": "mallory", "tok-a": "alice"}, May: func(u string, req callerauth.Request) bool {
		return req.Verb == VerbInvoke && ((u == "mallory" && req.Namespace == "team-m") || (u == "alice" && req.Namespace == "team-a"))
	}}
	s := offlineServer(auth, pool.Static{"team-m/echo": pool.DefaultPolicy(), "team-a/echo": pool.DefaultPolicy()})
	h := s.Handler()
	release := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(release); wg.Wait() }()

	// stall reports whether the request's bytes are held (its body is
	// being read) or it was answered at once (refused).
	stall := func(path string, contentLength int64) bool {
		b := &stalledBody{started: make(chan struct{}), release: release}
		r := httptest.NewRequest(http.MethodPost, path, b)
		r.ContentLength = contentLength
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer tok-m")
		answered := make(chan struct{})
		wg.Go(func() { defer close(answered); _ = serve(h, httptest.NewRecorder(), r) })
		select {
		case <-b.started:
			return true
		case <-answered:
			return false
		}
	}
	// The alias share: mallory is authenticated, which is all it takes;
	// as many as it holds (at most what the old common share held).
	held := 0
	for range s.cfg.Limits.NamespaceMaxBodyBytes / s.cfg.AliasBodyBytes {
		if !stall("/api/v1/serverless/invocations", s.cfg.AliasBodyBytes) {
			break
		}
		held++
	}
	require.Equal(t, aliasBodyShare, held, "alias bodies held at once")
	// Its own namespace's share: a chunked body (no Content-Length) is
	// counted at the body limit, however short it is.
	require.True(t, stall("/v1/namespaces/team-m/pools/echo/invocations", -1))
	require.True(t, stall("/v1/namespaces/team-m/pools/echo/invocations", s.cfg.Limits.NamespaceMaxBodyBytes-unknownLengthStep))

	r := httptest.NewRequest(http.MethodPost, "/v1/namespaces/team-a/pools/echo/invocations", strings.NewReader(`{"mode":"async","payload":{}}`))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer tok-a")
	w := httptest.NewRecorder()
	_ = serve(h, w, r) // past the budget it reaches the store, which this server has none of
	body, _ := io.ReadAll(w.Body)
	require.NotEqual(t, http.StatusTooManyRequests, w.Code,
		"alice's 29-byte body was refused because one other tenant holds the whole replica's body budget: %s", body)
}

// TestBodyBudgetChunkedBodyCountedAtItsSize (review of bae2696): a body
// sent without Content-Length (chunked; HTTP/2 clients and streaming
// encoders often send none) is counted at the body limit, ~86 MiB, before a
// byte is read, however short it is: a namespace can have one such request
// in flight at a time (96 MiB share), and the replica two (192 MiB). Two
// tenants each sending one tiny chunked body leave a third no room for a
// body of 20 MiB, and a tenant's second concurrent 29-byte chunked request
// is refused.
func TestBodyBudgetChunkedBodyCountedAtItsSize(t *testing.T) {
	auth := callerauthtest.Static{Users: map[string]string{"tok-a": "alice", "tok-b": "bob"}, May: func(u string, req callerauth.Request) bool {
		return req.Verb == VerbInvoke && ((u == "alice" && req.Namespace == "team-a") || (u == "bob" && req.Namespace == "team-b"))
	}}
	s := offlineServer(auth, pool.Static{"team-a/echo": pool.DefaultPolicy(), "team-b/echo": pool.DefaultPolicy()})
	h := s.Handler()
	release := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(release); wg.Wait() }()

	// One chunked request of alice's whose body has not all arrived yet.
	b := &stalledBody{started: make(chan struct{}), release: release}
	r := httptest.NewRequest(http.MethodPost, "/v1/namespaces/team-a/pools/echo/invocations", b)
	r.ContentLength = -1
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer tok-a")
	wg.Go(func() { _ = serve(h, httptest.NewRecorder(), r) })
	<-b.started

	// A second, 29 bytes, chunked too.
	r = httptest.NewRequest(http.MethodPost, "/v1/namespaces/team-a/pools/echo/invocations", io.NopCloser(strings.NewReader(`{"mode":"async","payload":{}}`)))
	r.ContentLength = -1
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer tok-a")
	w := httptest.NewRecorder()
	_ = serve(h, w, r)
	require.NotEqual(t, http.StatusTooManyRequests, w.Code,
		"a 29-byte body refused: one earlier chunked request of the namespace holds ~86 MiB of its 96 MiB share: %s", w.Body.String())
}

// TestChunkedBodyCountedAsItArrives: a body without a length is counted
// for what has arrived, and refused (429) once it outgrows what its
// namespace has left, not read on past its budget.
func TestChunkedBodyCountedAsItArrives(t *testing.T) {
	auth := callerauthtest.Static{Users: map[string]string{"tok-a": "alice"}, May: func(u string, req callerauth.Request) bool {
		return req.Verb == VerbInvoke && u == "alice" && req.Namespace == "team-a"
	}}
	s := offlineServer(auth, pool.Static{"team-a/echo": pool.DefaultPolicy()})
	h := s.Handler()
	release := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(release); wg.Wait() }()

	// All but one step of the namespace's share is held (a body is
	// counted at most at its limit: two bodies).
	for _, n := range []int64{s.cfg.MaxBodyBytes, s.cfg.Limits.NamespaceMaxBodyBytes - s.cfg.MaxBodyBytes - unknownLengthStep} {
		b := &stalledBody{started: make(chan struct{}), release: release}
		r := httptest.NewRequest(http.MethodPost, "/v1/namespaces/team-a/pools/echo/invocations", b)
		r.ContentLength = n
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer tok-a")
		wg.Go(func() { _ = serve(h, httptest.NewRecorder(), r) })
		<-b.started
	}

	// A chunked body of 2 MiB: its first step fits, its second does not.
	payload := `{"mode":"async","payload":"` + strings.Repeat("x", 2*unknownLengthStep) + `"}`
	r := httptest.NewRequest(http.MethodPost, "/v1/namespaces/team-a/pools/echo/invocations", io.NopCloser(strings.NewReader(payload)))
	r.ContentLength = -1
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer tok-a")
	w := httptest.NewRecorder()
	_ = serve(h, w, r)
	require.Equal(t, http.StatusTooManyRequests, w.Code, "%s", w.Body.String())
	require.Contains(t, w.Body.String(), ReasonNamespaceBodyBytes)
}
