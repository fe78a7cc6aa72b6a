package callerauth

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/runplane/runplane/internal/refusal"
)

func jwtWithExp(sub string, exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc(fmt.Appendf(nil, `{"sub":%q,"exp":%d}`, sub, exp.Unix())) + ".sig"
}

func invokeReq(pool string) Request {
	return Request{Verb: "create", Namespace: "team-a", Pool: pool, Subresource: SubresourceInvocations}
}

func refusalOf(t *testing.T, err error) *refusal.Error {
	t.Helper()
	var ref *refusal.Error
	require.ErrorAs(t, err, &ref)
	return ref
}

// TestUnknownTokenFloodSparesKnownCallers: a flood of forged tokens spends
// the unknown-token budget (429 with Retry-After, counted) and evicts
// nothing; a caller already known keeps being served without a review,
// and new tokens are reviewed again once the bucket refills.
func TestUnknownTokenFloodSparesKnownCallers(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	api := newFakeAPI(t, map[string]string{"tok-a": "alice", "tok-late": "bob"},
		map[string][]string{"alice": {"create team-a echo"}, "bob": {"create team-a echo"}}, false)
	reg := prometheus.NewRegistry()
	g, err := New(api.client, Options{Rates: Rates{TokenReviewQPS: 1, TokenReviewBurst: 5}, Registerer: reg, Clock: clk})
	require.NoError(t, err)
	_, err = g.Check(request("tok-a"), invokeReq("echo"))
	require.NoError(t, err)

	limited := 0
	for i := range 10_000 {
		_, err := g.Check(request(fmt.Sprintf("forged-%d", i)), invokeReq("echo"))
		if refusalOf(t, err).Status == http.StatusTooManyRequests {
			limited++
			assert.Equal(t, time.Second, refusalOf(t, err).RetryAfter)
		}
	}
	assert.Equal(t, 10_000-4, limited, "the burst (5, one spent by tok-a) is reviewed, the rest refused")
	assert.Equal(t, int32(5), api.tokenReviews.Load())
	assert.Equal(t, float64(limited), limitedCount(t, reg, "token"))

	_, err = g.Check(request("tok-a"), invokeReq("echo"))
	require.NoError(t, err, "the known caller is served during the flood")
	assert.Equal(t, int32(5), api.tokenReviews.Load(), "from the cache")

	_, err = g.Check(request("tok-late"), invokeReq("echo"))
	assert.Equal(t, http.StatusTooManyRequests, refusalOf(t, err).Status, "a new caller waits for the bucket")
	clk.Step(time.Second)
	_, err = g.Check(request("tok-late"), invokeReq("echo"))
	require.NoError(t, err)
}

func limitedCount(t *testing.T, reg *prometheus.Registry, review string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "runplane_caller_auth_rate_limited_total" && m.GetLabel()[0].GetValue() == review {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestTokenCacheNeverOutlivesTheToken: an accepted JWT is trusted until
// min(TokenCacheTTL, its exp); a token that is not a JWT for the TTL.
func TestTokenCacheNeverOutlivesTheToken(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	short := jwtWithExp("alice", clk.Now().Add(10*time.Second))
	long := jwtWithExp("alice", clk.Now().Add(time.Hour))
	grants := map[string][]string{"alice": {"create team-a echo"}}
	cases := []struct {
		name      string
		token     string
		after     time.Duration
		reviewed2 bool
	}{
		{"JWT expiring before the TTL: asked again after exp", short, 11 * time.Second, true},
		{"JWT expiring before the TTL: cached before exp", short, 9 * time.Second, false},
		{"JWT outliving the TTL: asked again after the TTL", long, 61 * time.Second, true},
		{"JWT outliving the TTL: cached within the TTL", long, 59 * time.Second, false},
		{"opaque token: cached within the TTL", "opaque", 59 * time.Second, false},
		{"opaque token: asked again after the TTL", "opaque", 61 * time.Second, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(clk.Now())
			api := newFakeAPI(t, map[string]string{tc.token: "alice"}, grants, false)
			g, err := New(api.client, Options{Clock: clk})
			require.NoError(t, err)
			_, err = g.Check(request(tc.token), invokeReq("echo"))
			require.NoError(t, err)
			clk.Step(tc.after)
			_, _ = g.Check(request(tc.token), invokeReq("echo"))
			want := int32(1)
			if tc.reviewed2 {
				want = 2
			}
			assert.Equal(t, want, api.tokenReviews.Load())
		})
	}
}

// TestRandomPoolsSpendOnlyTheirUsersBudget: one user asking about random
// pool names gets 429 once its own budget is spent and fills only its own
// decision cache; another user's cached decision is still served without
// a review, and that user's own budget is intact.
func TestRandomPoolsSpendOnlyTheirUsersBudget(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	api := newFakeAPI(t, map[string]string{"tok-a": "alice", "tok-m": "mallory"},
		map[string][]string{"alice": {"create team-a echo", "create team-a other"}}, false)
	g, err := New(api.client, Options{Rates: Rates{AccessReviewQPS: 1, AccessReviewBurst: 3}, DecisionsPerUser: 2, Clock: clk})
	require.NoError(t, err)
	_, err = g.Check(request("tok-a"), invokeReq("echo"))
	require.NoError(t, err)
	reviews := api.accessReviews.Load()

	limited := 0
	for i := range 1000 {
		_, err := g.Check(request("tok-m"), invokeReq(fmt.Sprintf("pool-%d", i)))
		switch refusalOf(t, err).Status {
		case http.StatusTooManyRequests:
			limited++
		case http.StatusForbidden:
		default:
			t.Fatalf("unexpected %v", err)
		}
	}
	assert.Equal(t, 997, limited, "mallory's burst of 3 is reviewed, the rest refused")
	assert.Equal(t, reviews+3, api.accessReviews.Load())

	_, err = g.Check(request("tok-a"), invokeReq("echo"))
	require.NoError(t, err, "alice's decision survived mallory's flood")
	assert.Equal(t, reviews+3, api.accessReviews.Load(), "served from alice's cache")
	_, err = g.Check(request("tok-a"), invokeReq("other"))
	require.NoError(t, err, "alice's budget is her own")
}
