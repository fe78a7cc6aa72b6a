package natscallout

import (
	"context"
	"crypto/sha256"
	"time"

	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/clock"
)

// Cached remembers what an Authenticator decided, by the SHA-256 of the
// token: an admission until the identity expires or TTL passes, whichever
// is first, so that a reconnect with the same token (a nats-server restart
// reconnects every worker at once) costs no apiserver call; a refusal by
// the apiserver (ReasonInvalidToken, ReasonNotWorker) for RefusedTTL, so
// that a client repeating a refused token costs one review per RefusedTTL.
// Outages and timeouts are not remembered, nor malformed tokens (refused
// without a call anyway). Admissions and refusals live in separate caches:
// refused tokens never evict admitted ones.
type Cached struct {
	auth              Authenticator
	clock             clock.PassiveClock
	ttl, refusedTTL   time.Duration
	admitted, refused *cache.LRUExpireCache
}

// CacheOptions tunes Cached. Zero values take the defaults.
type CacheOptions struct {
	// TTL bounds how long an admission is reused (default 1m): a worker
	// whose Pod was deleted can reconnect this long with its old token.
	TTL time.Duration
	// RefusedTTL keeps refusals (default 5s).
	RefusedTTL time.Duration
	// Size bounds each of the two caches (default 16384 tokens).
	Size  int
	Clock clock.PassiveClock
}

// NewCached wraps auth with the caches.
func NewCached(auth Authenticator, o CacheOptions) *Cached {
	if o.TTL == 0 {
		o.TTL = time.Minute
	}
	if o.RefusedTTL == 0 {
		o.RefusedTTL = 5 * time.Second
	}
	if o.Size == 0 {
		o.Size = 16384
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &Cached{auth: auth, clock: o.Clock, ttl: o.TTL, refusedTTL: o.RefusedTTL,
		admitted: cache.NewLRUExpireCacheWithClock(o.Size, o.Clock), refused: cache.NewLRUExpireCacheWithClock(o.Size, o.Clock)}
}

type cachedRefusal struct {
	id  Identity
	err error
}

// Known reports whether token's answer is in memory: Authenticate will
// answer it without calling anything.
func (c *Cached) Known(token string) bool {
	key := sha256.Sum256([]byte(token))
	if _, ok := c.admitted.Get(key); ok {
		return true
	}
	_, ok := c.refused.Get(key)
	return ok
}

// Authenticate implements Authenticator.
func (c *Cached) Authenticate(ctx context.Context, token string) (Identity, error) {
	key := sha256.Sum256([]byte(token))
	if v, ok := c.admitted.Get(key); ok {
		return v.(Identity), nil
	}
	if v, ok := c.refused.Get(key); ok {
		r := v.(cachedRefusal)
		return r.id, r.err
	}
	id, err := c.auth.Authenticate(ctx, token)
	switch {
	case err == nil:
		if ttl := min(c.ttl, id.Expires.Sub(c.clock.Now())); ttl > 0 {
			c.admitted.Add(key, id, ttl)
		}
	case Reason(err) == ReasonInvalidToken || Reason(err) == ReasonNotWorker:
		c.refused.Add(key, cachedRefusal{id, err}, c.refusedTTL)
	}
	return id, err
}
