// Package tokencache is runplane's one cache of decisions about bearer
// tokens (the queue ingress's callers, NATS workers, accessor users): what
// a TokenReview or access review answered, so that a token seen again
// costs no apiserver call.
//
// Keys are the token's SHA-256, never the token. Accepted and refused
// tokens live in two bounded LRUs, so a flood of forged tokens never
// evicts a valid caller, and an acceptance is never kept past the token's
// own expiry. k8s.io/apiserver's token cache keeps both in one LRU with
// one TTL, which is why this one exists.
package tokencache

import (
	"crypto/sha256"
	"encoding/json"
	"time"

	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/internal/jwtclaims"
)

// Cache remembers a V per token, apart for accepted and refused tokens.
type Cache[V any] struct {
	clock             clock.PassiveClock
	accepted, refused *cache.LRUExpireCache
}

// New keeps at most size accepted and size refused tokens; clk drives
// expiry (nil: the real clock).
func New[V any](size int, clk clock.PassiveClock) *Cache[V] {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Cache[V]{clock: clk,
		accepted: cache.NewLRUExpireCacheWithClock(size, clk), refused: cache.NewLRUExpireCacheWithClock(size, clk)}
}

// Get returns what is remembered of token: found is false when nothing is.
func (c *Cache[V]) Get(token string) (v V, accepted, found bool) {
	key := sha256.Sum256([]byte(token))
	if x, ok := c.accepted.Get(key); ok {
		return x.(V), true, true
	}
	if x, ok := c.refused.Get(key); ok {
		return x.(V), false, true
	}
	return v, false, false
}

// Accept remembers v for token for ttl, never past expires (zero: the exp
// claim of token when it is a JWT).
func (c *Cache[V]) Accept(token string, v V, ttl time.Duration, expires time.Time) {
	if expires.IsZero() {
		expires = jwtExpiry(token)
	}
	if !expires.IsZero() {
		ttl = min(ttl, expires.Sub(c.clock.Now()))
	}
	if ttl > 0 {
		c.accepted.Add(sha256.Sum256([]byte(token)), v, ttl)
	}
}

// jwtExpiry reads the exp claim of a token without verifying it: the
// apiserver has just vouched for the token, and TokenReview does not
// report its expiry. It is zero for a token that is not a JWT with exp.
func jwtExpiry(token string) time.Time {
	var claims struct {
		Exp json.Number `json:"exp"`
	}
	if jwtclaims.Decode(token, &claims) != nil {
		return time.Time{}
	}
	secs, err := claims.Exp.Float64()
	if err != nil || secs <= 0 {
		return time.Time{}
	}
	return time.Unix(int64(secs), 0)
}

// Refuse remembers v for token for ttl.
func (c *Cache[V]) Refuse(token string, v V, ttl time.Duration) {
	if ttl > 0 {
		c.refused.Add(sha256.Sum256([]byte(token)), v, ttl)
	}
}
