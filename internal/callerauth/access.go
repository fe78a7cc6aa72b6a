package callerauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"
)

// accessReviews caches SubjectAccessReview decisions per user: each user
// has its own bounded cache and its own rate of reviews it may cause, so a
// user who asks about random pool names fills and spends only its own.
// The apiserver library's authorizer keeps one shared 8192-entry LRU,
// which such a user empties of everyone else's decisions; hence this
// layer in front of it (whose own cache is off).
type accessReviews struct {
	review            authorizer.UnconditionalAuthorizer
	clock             clock.PassiveClock
	allowTTL, denyTTL time.Duration
	perUser           int
	qps               float32
	burst             int
	limited           prometheus.Counter
	mu                sync.Mutex
	users             *lru.Cache // userKey → *userAccess
}

type userAccess struct {
	decisions *cache.LRUExpireCache // request → decision
	misses    flowcontrol.PassiveRateLimiter
}

type decision struct {
	d      authorizer.Decision
	reason string
}

// userKey identifies everything a SubjectAccessReview is asked about the
// user: a caller whose groups changed is another cache.
func userKey(u user.Info) [32]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q", u.GetName(), u.GetUID())
	for _, g := range u.GetGroups() {
		fmt.Fprintf(h, " g%q", g)
	}
	extra := u.GetExtra()
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(h, " e%q%q", k, extra[k])
	}
	return [32]byte(h.Sum(nil))
}

func (a *accessReviews) user(u user.Info) *userAccess {
	key := userKey(u)
	a.mu.Lock()
	defer a.mu.Unlock()
	if v, ok := a.users.Get(key); ok {
		return v.(*userAccess)
	}
	ua := &userAccess{decisions: cache.NewLRUExpireCacheWithClock(a.perUser, a.clock),
		misses: flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(a.qps, a.burst, a.clock)}
	a.users.Add(key, ua)
	return ua
}

// Authorize implements authorizer.UnconditionalAuthorizer.
func (a *accessReviews) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	ua := a.user(attrs.GetUser())
	key := fmt.Sprintf("%s/%s/%s/%s", attrs.GetVerb(), attrs.GetNamespace(), attrs.GetSubresource(), attrs.GetName())
	if v, ok := ua.decisions.Get(key); ok {
		d := v.(decision)
		return d.d, d.reason, nil
	}
	if !ua.misses.TryAccept() {
		a.limited.Inc()
		return authorizer.DecisionNoOpinion, "", errBusy
	}
	d, reason, err := a.review.Authorize(ctx, attrs)
	if err != nil {
		return d, reason, err
	}
	ttl := a.denyTTL
	if d == authorizer.DecisionAllow {
		ttl = a.allowTTL
	}
	ua.decisions.Add(key, decision{d, reason}, ttl)
	return d, reason, nil
}
