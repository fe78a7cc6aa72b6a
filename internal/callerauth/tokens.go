package callerauth

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/runplane/runplane/internal/tokencache"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/client-go/util/flowcontrol"
)

// errBusy is a review that was not asked because its rate limit is spent.
var errBusy = errors.New("too many reviews")

// tokenReviews caches TokenReviews (tokencache) and bounds the rate of
// reviews of tokens it does not know, which the apiserver library's token
// cache does not.
type tokenReviews struct {
	review          authenticator.Token
	ttl, refusedTTL time.Duration
	known           *tokencache.Cache[*authenticator.Response]
	// misses bounds the reviews of tokens the cache does not know.
	misses  flowcontrol.PassiveRateLimiter
	limited prometheus.Counter
}

// AuthenticateToken implements authenticator.Token.
func (t *tokenReviews) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	if resp, ok, found := t.known.Get(token); found {
		return resp, ok, nil
	}
	if !t.misses.TryAccept() {
		t.limited.Inc()
		return nil, false, errBusy
	}
	resp, ok, err := t.review.AuthenticateToken(ctx, token)
	switch {
	case ok:
		t.known.Accept(token, resp, t.ttl, time.Time{})
	case !unavailable(err):
		t.known.Refuse(token, nil, t.refusedTTL)
	}
	return resp, ok, err
}
