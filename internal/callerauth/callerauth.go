// Package callerauth decides who may call the queue ingress: a caller
// presents a bearer token, which the apiserver authenticates (TokenReview:
// ServiceAccount tokens and whatever else the cluster accepts, e.g. OIDC),
// and Kubernetes RBAC authorizes (SubjectAccessReview) on runplane's
// serverless resource — so tenants grant access with ordinary Roles.
//
// Both reviews go through k8s.io/apiserver's webhook token authenticator
// and delegating authorizer, the clients kube-rbac-proxy and
// controller-runtime's secure metrics use. In front of them sit caches
// built to survive a flood (tokens.go, access.go): accepted tokens are kept
// apart from forged ones and never past their own expiry, reviews of
// unknown tokens are rate limited globally and access reviews per user, and
// each user's access decisions live in that user's own bounded cache. A
// review refused by those limits is a 429 with Retry-After for the caller,
// while callers already known keep being served from the caches.
package callerauth

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	webhooktoken "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
	"k8s.io/utils/lru"

	"github.com/runplane/runplane/internal/refusal"
	"github.com/runplane/runplane/internal/tokencache"
)

// The RBAC coordinates of a pool's invocations: verb create on
// pools/invocations invokes, get reads status and results, delete cancels.
const (
	Group                  = "serverless.runplane.io"
	Resource               = "pools"
	SubresourceInvocations = "invocations"
)

// Request is what a caller wants to do.
type Request struct {
	Verb        string // create, get, delete, ...
	Namespace   string
	Pool        string // empty: any pool in the namespace
	Subresource string // SubresourceInvocations, or empty for the pool itself
}

func (r Request) String() string {
	res := Resource
	if r.Subresource != "" {
		res += "/" + r.Subresource
	}
	name := ""
	if r.Pool != "" {
		name = fmt.Sprintf(" %q", r.Pool)
	}
	return fmt.Sprintf("%s %s%s in API group %q in namespace %q", r.Verb, res, name, Group, r.Namespace)
}

// Rates bound the reviews: the callerAuth section of runplane-queue's
// configuration file (queue/config embeds it as it is). Zero values take
// the defaults of Default.
type Rates struct {
	// KubeQPS and KubeBurst limit the Gate's own Kubernetes client, which
	// its caller builds (default 50, 100): a flood of callers spends no
	// other part's.
	KubeQPS   float32 `json:"kubeQPS,omitempty"`
	KubeBurst int     `json:"kubeBurst,omitempty"`
	// TokenReviewQPS and TokenReviewBurst bound the TokenReviews of tokens
	// not in the caches, for all callers together (defaults 20/s, 40):
	// beyond, a new token gets 429 while known callers are served.
	TokenReviewQPS   float32 `json:"tokenReviewQPS,omitempty"`
	TokenReviewBurst int     `json:"tokenReviewBurst,omitempty"`
	// AccessReviewQPS and AccessReviewBurst bound the
	// SubjectAccessReviews one user causes with requests not in its cache
	// (defaults 5/s, 20 per user).
	AccessReviewQPS   float32 `json:"accessReviewQPS,omitempty"`
	AccessReviewBurst int     `json:"accessReviewBurst,omitempty"`
}

// Default fills the zero fields.
func (r *Rates) Default() {
	r.KubeQPS, r.KubeBurst = cmp.Or(r.KubeQPS, 50), cmp.Or(r.KubeBurst, 100)
	r.TokenReviewQPS, r.TokenReviewBurst = cmp.Or(r.TokenReviewQPS, 20), cmp.Or(r.TokenReviewBurst, 40)
	r.AccessReviewQPS, r.AccessReviewBurst = cmp.Or(r.AccessReviewQPS, 5), cmp.Or(r.AccessReviewBurst, 20)
}

// Options tunes the caches and limits. Zero values take the defaults below.
type Options struct {
	// TokenCacheTTL is how long an accepted token is trusted without asking
	// again (default 1m), never past the token's own exp claim when it is a
	// JWT: a revoked token works this long at most.
	TokenCacheTTL time.Duration
	// AllowCacheTTL and DenyCacheTTL keep RBAC answers (defaults 30s, 10s:
	// a new RoleBinding takes effect within DenyCacheTTL, a removed one
	// within AllowCacheTTL). A refused token is remembered for
	// DenyCacheTTL too.
	AllowCacheTTL, DenyCacheTTL time.Duration
	// Rates bound the reviews (the configuration file's section).
	Rates
	// DecisionsPerUser bounds each user's decision cache (default 128) and
	// Users the number of users whose caches are kept (default 1024): at
	// most 128Ki decisions in memory.
	DecisionsPerUser, Users int
	// Audiences a token must carry; empty: the apiserver's own.
	Audiences []string
	// Registerer receives runplane_caller_auth_rate_limited_total (nil:
	// unregistered).
	Registerer prometheus.Registerer
	// Clock is for tests (default the real clock).
	Clock clock.PassiveClock
}

func (o *Options) defaults() {
	o.TokenCacheTTL = cmp.Or(o.TokenCacheTTL, time.Minute)
	o.AllowCacheTTL = cmp.Or(o.AllowCacheTTL, 30*time.Second)
	o.DenyCacheTTL = cmp.Or(o.DenyCacheTTL, 10*time.Second)
	o.Rates.Default()
	o.DecisionsPerUser = cmp.Or(o.DecisionsPerUser, 128)
	o.Users = cmp.Or(o.Users, 1024)
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

// Gate authenticates and authorizes requests.
type Gate struct {
	authn authenticator.Request
	// Only Authorize: runplane's checks have no conditional decisions
	// (authorizer.Authorizer's ConditionsAwareAuthorize, apiserver v0.37).
	authz authorizer.UnconditionalAuthorizer
}

// New builds a Gate that reviews tokens and access through client, which
// should be the Gate's own (its client-side rate limit is the Gate's alone).
func New(client kubernetes.Interface, o Options) (*Gate, error) {
	o.defaults()
	limited := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "runplane_caller_auth_rate_limited_total",
		Help: "Ingress callers refused with 429 because the rate of reviews was spent: review=token (unknown tokens, all callers) or access (one user's uncached access checks).",
	}, []string{"review"})
	if o.Registerer != nil {
		if err := o.Registerer.Register(limited); err != nil {
			return nil, fmt.Errorf("registering the caller auth metrics: %w", err)
		}
	}
	// The apiserver's own defaults for webhook token/authorization retries.
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	// The pieces of apiserver's delegating authenticator that apply here:
	// the TokenReview client and the bearer-token header reader, without
	// the union that flattens an outage into a refusal.
	reviewer, err := webhooktoken.NewFromInterface(client.AuthenticationV1(), authenticator.Audiences(o.Audiences),
		*backoff, 10*time.Second, webhooktoken.AuthenticatorMetrics{
			RecordRequestTotal:   func(context.Context, string) {},
			RecordRequestLatency: func(context.Context, string, float64) {},
		})
	if err != nil {
		return nil, fmt.Errorf("building the token reviewer: %w", err)
	}
	authn := bearertoken.New(&tokenReviews{review: reviewer, ttl: o.TokenCacheTTL, refusedTTL: o.DenyCacheTTL,
		known:   tokencache.New[*authenticator.Response](8192, o.Clock),
		misses:  flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(o.TokenReviewQPS, o.TokenReviewBurst, o.Clock),
		limited: limited.WithLabelValues("token")})
	// The library's shared cache is off (zero TTLs): accessReviews caches.
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		WebhookRetryBackoff:       backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the access reviewer: %w", err)
	}
	return &Gate{authn: authn, authz: &accessReviews{review: authz, clock: o.Clock, allowTTL: o.AllowCacheTTL, denyTTL: o.DenyCacheTTL,
		perUser: o.DecisionsPerUser, qps: o.AccessReviewQPS, burst: o.AccessReviewBurst, users: lru.New(o.Users),
		limited: limited.WithLabelValues("access")}}, nil
}

// unavailable tells an apiserver that could not answer (an API error, a
// network error, a timeout) from a token it refused, which the reviewer
// also reports as a plain error.
func unavailable(err error) bool {
	var status apierrors.APIStatus
	var netErr net.Error
	return err != nil && (errors.As(err, &status) || errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded))
}

// Check returns the caller of r when it may do req. A *refusal.Error is
// for the caller (401/403/429); any other error means the apiserver could not
// be asked (503).
func (g *Gate) Check(r *http.Request, req Request) (user.Info, error) {
	u, err := g.Authenticate(r)
	if err != nil {
		return nil, err
	}
	decision, reason, err := g.authz.Authorize(r.Context(), authorizer.AttributesRecord{
		User:            u,
		Verb:            req.Verb,
		Namespace:       req.Namespace,
		APIGroup:        Group,
		Resource:        Resource,
		Subresource:     req.Subresource,
		Name:            req.Pool,
		ResourceRequest: true,
	})
	if errors.Is(err, errBusy) {
		return nil, busy(fmt.Sprintf("%q asked about too many different pools or verbs at once; retry later", u.GetName()))
	}
	if err != nil && decision != authorizer.DecisionAllow {
		return nil, fmt.Errorf("reviewing %s's access: %w", u.GetName(), err)
	}
	if decision != authorizer.DecisionAllow {
		msg := fmt.Sprintf("%q cannot %s", u.GetName(), req)
		if reason != "" {
			msg += ": " + reason
		}
		return nil, refusal.New(http.StatusForbidden, "", "%s", msg)
	}
	return u, nil
}

// Authenticate returns the caller of r (TokenReview, through the token
// caches), without asking what it may do: who the caller is, before
// anything of its request is read. Its errors are Check's.
func (g *Gate) Authenticate(r *http.Request) (user.Info, error) {
	res, ok, err := g.authn.AuthenticateRequest(r)
	if errors.Is(err, errBusy) {
		return nil, busy("too many unknown bearer tokens to review at the moment; retry later")
	}
	if !ok && unavailable(err) {
		return nil, fmt.Errorf("reviewing the caller's token: %w", err)
	}
	if !ok {
		return nil, refusal.New(http.StatusUnauthorized, "", "a valid bearer token is required (Authorization: Bearer <token>)")
	}
	return res.User, nil
}

func busy(msg string) *refusal.Error {
	return &refusal.Error{Status: http.StatusTooManyRequests, Err: errors.New(msg), RetryAfter: time.Second}
}
