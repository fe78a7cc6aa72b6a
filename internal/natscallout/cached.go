package natscallout

import (
	"cmp"
	"context"
	"time"

	"k8s.io/utils/clock"

	"github.com/runplane/runplane/internal/tokencache"
)

// Cached remembers what an Authenticator decided (tokencache): an
// admission until the identity expires or TTL passes, whichever is first,
// so that a reconnect with the same token (a nats-server restart
// reconnects every worker at once) costs no apiserver call; a refusal by
// the apiserver (ReasonInvalidToken, ReasonNotWorker) for RefusedTTL, so
// that a client repeating a refused token costs one review per RefusedTTL.
// Outages and timeouts are not remembered, nor malformed tokens (refused
// without a call anyway).
type Cached struct {
	auth            Authenticator
	ttl, refusedTTL time.Duration
	answers         *tokencache.Cache[answer]
}

// CacheOptions tunes Cached. Zero values take the defaults.
type CacheOptions struct {
	// TTL bounds how long an admission is reused (default 1m): a worker
	// whose Pod was deleted can reconnect this long with its old token.
	TTL time.Duration
	// RefusedTTL keeps refusals (default 5s).
	RefusedTTL time.Duration
	// Size bounds admissions and refusals each (default 16384 tokens).
	Size  int
	Clock clock.PassiveClock
}

// NewCached wraps auth with the caches.
func NewCached(auth Authenticator, o CacheOptions) *Cached {
	return &Cached{auth: auth, ttl: cmp.Or(o.TTL, time.Minute), refusedTTL: cmp.Or(o.RefusedTTL, 5*time.Second),
		answers: tokencache.New[answer](cmp.Or(o.Size, 16384), o.Clock)}
}

type answer struct {
	id  Identity
	err error
}

// Known reports whether token's answer is in memory: Authenticate will
// answer it without calling anything.
func (c *Cached) Known(token string) bool {
	_, _, found := c.answers.Get(token)
	return found
}

// Authenticate implements Authenticator.
func (c *Cached) Authenticate(ctx context.Context, token string) (Identity, error) {
	if a, _, found := c.answers.Get(token); found {
		return a.id, a.err
	}
	id, err := c.auth.Authenticate(ctx, token)
	switch {
	case err == nil:
		c.answers.Accept(token, answer{id: id}, c.ttl, id.Expires)
	case Reason(err) == ReasonInvalidToken || Reason(err) == ReasonNotWorker:
		c.answers.Refuse(token, answer{id, err}, c.refusedTTL)
	}
	return id, err
}
