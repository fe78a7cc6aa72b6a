package claimauth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeReviewer answers from tokens (token → allowed) and counts reviews.
type fakeReviewer struct {
	tokens  map[string]bool
	outage  bool
	reviews int
	seen    []string
}

func (f *fakeReviewer) Review(_ context.Context, token string, c Claim) (bool, string, error) {
	f.reviews++
	f.seen = append(f.seen, token)
	if f.outage {
		return false, "", errors.New("dial tcp 10.0.0.1:443: connection refused")
	}
	allowed, ok := f.tokens[token]
	if !ok {
		return false, "", apierrors.NewUnauthorized("Unauthorized")
	}
	if !allowed {
		return false, "RBAC: no rule", nil
	}
	return true, "", nil
}

var claim = Claim{Namespace: "team-a", Name: "data"}

func serve(g *Gate, header string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, "/files/", nil)
	if header != "" {
		r.Header.Set("Authorization", header)
	}
	g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("served")) })).ServeHTTP(rec, r)
	return rec
}

func TestWrap(t *testing.T) {
	cases := []struct {
		name       string
		header     string
		outage     bool
		wantStatus int
		wantBody   []string // substrings of the JSON error
		wantReview bool
	}{
		{name: "no header", wantStatus: 401, wantBody: []string{"bearer token is required", `get persistentvolumeclaims \"data\" in namespace \"team-a\"`}},
		{name: "basic auth", header: "Basic dXNlcjpwYXNz", wantStatus: 401, wantBody: []string{"bearer token is required"}},
		{name: "empty bearer", header: "Bearer   ", wantStatus: 401, wantBody: []string{"bearer token is required"}},
		{name: "invalid token", header: "Bearer forged", wantStatus: 401, wantBody: []string{"not accepted by the API server"}, wantReview: true},
		{name: "denied", header: "Bearer reader-of-b", wantStatus: 403, wantBody: []string{"cannot get persistentvolumeclaims", "team-a", "RBAC: no rule"}, wantReview: true},
		{name: "allowed", header: "Bearer reader", wantStatus: 200, wantReview: true},
		{name: "scheme case-insensitive", header: "bearer reader", wantStatus: 200, wantReview: true},
		{name: "outage", header: "Bearer reader", outage: true, wantStatus: 503, wantBody: []string{"cannot authorize", "connection refused"}, wantReview: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rev := &fakeReviewer{tokens: map[string]bool{"reader": true, "reader-of-b": false}, outage: tc.outage}
			g, err := New(claim, rev, Options{})
			require.NoError(t, err)
			rec := serve(g, tc.header)
			assert.Equal(t, tc.wantStatus, rec.Code, rec.Body.String())
			assert.Equal(t, tc.wantReview, rev.reviews == 1, "reviews: %d", rev.reviews)
			if tc.wantStatus == 200 {
				assert.Equal(t, "served", rec.Body.String())
				return
			}
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
			var body map[string]string
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			for _, s := range tc.wantBody {
				assert.Contains(t, rec.Body.String(), s)
			}
			assert.NotContains(t, rec.Body.String(), "served")
			if tc.wantStatus == 401 {
				assert.Contains(t, rec.Header().Get("WWW-Authenticate"), "Bearer")
			}
		})
	}
}

func TestCacheExpiry(t *testing.T) {
	cases := []struct {
		name    string
		token   string
		ttl     time.Duration // the TTL that applies to this answer
		status  int
		options Options
	}{
		{name: "allowed kept 10s", token: "reader", ttl: 10 * time.Second, status: 200},
		{name: "denied kept 2s", token: "reader-of-b", ttl: 2 * time.Second, status: 403},
		{name: "invalid kept 2s", token: "forged", ttl: 2 * time.Second, status: 401},
		{name: "custom allow TTL", token: "reader", ttl: time.Minute, status: 200, options: Options{AllowTTL: time.Minute}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
			rev := &fakeReviewer{tokens: map[string]bool{"reader": true, "reader-of-b": false}}
			o := tc.options
			o.Clock = clk
			g, err := New(claim, rev, o)
			require.NoError(t, err)
			assert.Equal(t, tc.status, serve(g, "Bearer "+tc.token).Code)
			clk.Step(tc.ttl - time.Millisecond)
			assert.Equal(t, tc.status, serve(g, "Bearer "+tc.token).Code)
			assert.Equal(t, 1, rev.reviews, "answered from the cache within the TTL")
			clk.Step(2 * time.Millisecond) // just past the TTL
			assert.Equal(t, tc.status, serve(g, "Bearer "+tc.token).Code)
			assert.Equal(t, 2, rev.reviews, "asked again once the TTL passed")
		})
	}
}

func TestCacheBounded(t *testing.T) {
	rev := &fakeReviewer{tokens: map[string]bool{"a": true, "b": true, "c": true}}
	g, err := New(claim, rev, Options{MaxEntries: 2, Clock: clocktesting.NewFakeClock(time.Unix(0, 0))})
	require.NoError(t, err)
	for _, tok := range []string{"a", "b", "c", "a"} {
		assert.Equal(t, 200, serve(g, "Bearer "+tok).Code)
	}
	assert.Equal(t, 4, rev.reviews, "a was evicted by c: the cache holds 2 tokens")
}

// TestForgedTokensSpareAllowedUser: a flood of tokens the API server
// rejects fills only the refusal side of the cache; the allowed user stays
// cached (one LRU for both evicted it).
func TestForgedTokensSpareAllowedUser(t *testing.T) {
	rev := &fakeReviewer{tokens: map[string]bool{"reader": true}}
	g, err := New(claim, rev, Options{MaxEntries: 2, Clock: clocktesting.NewFakeClock(time.Unix(0, 0))})
	require.NoError(t, err)
	assert.Equal(t, 200, serve(g, "Bearer reader").Code)
	for _, forged := range []string{"x", "y", "z"} {
		assert.Equal(t, 401, serve(g, "Bearer "+forged).Code)
	}
	assert.Equal(t, 200, serve(g, "Bearer reader").Code)
	assert.Equal(t, 4, rev.reviews, "reader answered from the cache")
}

// TestExpiredTokenNotServedFromCache: an allowed JWT is cached no longer
// than its exp claim, though AllowTTL is longer.
func TestExpiredTokenNotServedFromCache(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	tok := "e30." + base64.RawURLEncoding.EncodeToString([]byte(`{"exp":1000002}`)) + ".sig"
	rev := &fakeReviewer{tokens: map[string]bool{tok: true}}
	g, err := New(claim, rev, Options{AllowTTL: time.Minute, Clock: clk})
	require.NoError(t, err)
	assert.Equal(t, 200, serve(g, "Bearer "+tok).Code)
	clk.Step(3 * time.Second)
	delete(rev.tokens, tok) // the API server refuses it now: expired
	assert.Equal(t, 401, serve(g, "Bearer "+tok).Code)
}

func TestOutageNotCached(t *testing.T) {
	rev := &fakeReviewer{tokens: map[string]bool{"reader": true}, outage: true}
	g, err := New(claim, rev, Options{Clock: clocktesting.NewFakeClock(time.Unix(0, 0))})
	require.NoError(t, err)
	assert.Equal(t, 503, serve(g, "Bearer reader").Code)
	rev.outage = false
	assert.Equal(t, 200, serve(g, "Bearer reader").Code, "an outage is not remembered")
}

func TestForbiddenReview(t *testing.T) {
	rev := reviewerFunc(func() error {
		return apierrors.NewForbidden(schema.GroupResource{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"}, "", errors.New("no"))
	})
	g, err := New(claim, rev, Options{})
	require.NoError(t, err)
	assert.Equal(t, 403, serve(g, "Bearer x").Code)
}

type reviewerFunc func() error

func (f reviewerFunc) Review(context.Context, string, Claim) (bool, string, error) {
	return false, "", f()
}

func TestNewRequiresClaim(t *testing.T) {
	_, err := New(Claim{Namespace: "a"}, &fakeReviewer{}, Options{})
	assert.ErrorContains(t, err, "required")
}
