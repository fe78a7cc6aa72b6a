package callerauth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/internal/jwtclaims"
)

// errBusy is a review that was not asked because its rate limit is spent.
var errBusy = errors.New("too many reviews")

// tokenReviews caches TokenReviews by the token's SHA-256 and bounds the
// rate of reviews of tokens it does not know. The apiserver library's
// token cache (k8s.io/apiserver .../token/cache) keeps accepted and
// refused tokens in one LRU with a fixed TTL, so a flood of forged tokens
// evicts valid ones, nothing bounds the reviews it sends, and an accepted
// token is trusted for the whole TTL even when it expires sooner; those
// three are why this cache is hand-written.
type tokenReviews struct {
	review          authenticator.Token
	clock           clock.PassiveClock
	ttl, refusedTTL time.Duration
	// known holds accepted tokens, refused forged ones: separate, so that
	// forged tokens never evict a valid caller.
	known, refused *cache.LRUExpireCache
	// misses bounds the reviews of tokens in neither cache.
	misses  flowcontrol.PassiveRateLimiter
	limited prometheus.Counter
}

// AuthenticateToken implements authenticator.Token.
func (t *tokenReviews) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	key := sha256.Sum256([]byte(token))
	if v, ok := t.known.Get(key); ok {
		return v.(*authenticator.Response), true, nil
	}
	if _, ok := t.refused.Get(key); ok {
		return nil, false, nil
	}
	if !t.misses.TryAccept() {
		t.limited.Inc()
		return nil, false, errBusy
	}
	resp, ok, err := t.review.AuthenticateToken(ctx, token)
	switch {
	case ok:
		ttl := t.ttl
		if exp, isJWT := jwtExpiry(token); isJWT {
			ttl = min(ttl, exp.Sub(t.clock.Now()))
		}
		if ttl > 0 {
			t.known.Add(key, resp, ttl)
		}
	case !unavailable(err):
		t.refused.Add(key, struct{}{}, t.refusedTTL)
	}
	return resp, ok, err
}

// jwtExpiry reads the exp claim of a token without verifying it: the
// apiserver has just vouched for the token, and TokenReview does not
// report its expiry. ok is false for a token that is not a JWT with exp.
func jwtExpiry(token string) (exp time.Time, ok bool) {
	var claims struct {
		Exp json.Number `json:"exp"`
	}
	if jwtclaims.Decode(token, &claims) != nil {
		return time.Time{}, false
	}
	secs, err := claims.Exp.Float64()
	if err != nil || secs <= 0 {
		return time.Time{}, false
	}
	return time.Unix(int64(secs), 0), true
}
