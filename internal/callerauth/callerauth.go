// Package callerauth decides who may call the queue ingress: a caller
// presents a bearer token, which the apiserver authenticates (TokenReview:
// ServiceAccount tokens and whatever else the cluster accepts, e.g. OIDC),
// and Kubernetes RBAC authorizes (SubjectAccessReview) on runplane's
// serverless resource — so tenants grant access with ordinary Roles.
//
// Both reviews go through k8s.io/apiserver's caching webhook token
// authenticator and delegating authorizer, the clients kube-rbac-proxy and
// controller-runtime's secure metrics use.
package callerauth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	tokencache "k8s.io/apiserver/pkg/authentication/token/cache"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	webhooktoken "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	"k8s.io/client-go/kubernetes"
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

// Refusal is an answer for the caller: 401 without a valid token, 403 when
// RBAC says no.
type Refusal struct {
	Status  int
	Message string
}

func (r *Refusal) Error() string { return r.Message }

// Options tunes the caches. Zero values take the defaults below.
type Options struct {
	// TokenCacheTTL is how long an authenticated token is trusted without
	// asking again (default 1m; a revoked token works this long at most).
	TokenCacheTTL time.Duration
	// AllowCacheTTL and DenyCacheTTL keep RBAC answers (defaults 30s, 10s:
	// a new RoleBinding takes effect within DenyCacheTTL). A refused token
	// is remembered for DenyCacheTTL too, so a flood of forged tokens costs
	// one review each per DenyCacheTTL.
	AllowCacheTTL, DenyCacheTTL time.Duration
	// Audiences a token must carry; empty: the apiserver's own.
	Audiences []string
}

// Gate authenticates and authorizes requests.
type Gate struct {
	authn authenticator.Request
	authz authorizer.Authorizer
}

// New builds a Gate that reviews tokens and access through client.
func New(client kubernetes.Interface, o Options) (*Gate, error) {
	if o.TokenCacheTTL == 0 {
		o.TokenCacheTTL = time.Minute
	}
	if o.AllowCacheTTL == 0 {
		o.AllowCacheTTL = 30 * time.Second
	}
	if o.DenyCacheTTL == 0 {
		o.DenyCacheTTL = 10 * time.Second
	}
	// The apiserver's own defaults for webhook token/authorization retries.
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	// The pieces of apiserver's delegating authenticator that apply here:
	// the TokenReview client, its cache, and the bearer-token header
	// reader, without the union that flattens an outage into a refusal.
	reviewer, err := webhooktoken.NewFromInterface(client.AuthenticationV1(), authenticator.Audiences(o.Audiences),
		*backoff, 10*time.Second, webhooktoken.AuthenticatorMetrics{
			RecordRequestTotal:   func(context.Context, string) {},
			RecordRequestLatency: func(context.Context, string, float64) {},
		})
	if err != nil {
		return nil, fmt.Errorf("building the token reviewer: %w", err)
	}
	authn := bearertoken.New(tokencache.New(reviewer, false, o.TokenCacheTTL, o.DenyCacheTTL))
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             o.AllowCacheTTL,
		DenyCacheTTL:              o.DenyCacheTTL,
		WebhookRetryBackoff:       backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the access reviewer: %w", err)
	}
	return &Gate{authn: authn, authz: authz}, nil
}

// unavailable tells an apiserver that could not answer (an API error, a
// network error, a timeout) from a token it refused, which the reviewer
// also reports as a plain error.
func unavailable(err error) bool {
	var status apierrors.APIStatus
	var netErr net.Error
	return err != nil && (errors.As(err, &status) || errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded))
}

// Check returns the caller of r when it may do req. A *Refusal error is
// for the caller (401/403); any other error means the apiserver could not
// be asked (503).
func (g *Gate) Check(r *http.Request, req Request) (user.Info, error) {
	res, ok, err := g.authn.AuthenticateRequest(r)
	if !ok && unavailable(err) {
		return nil, fmt.Errorf("reviewing the caller's token: %w", err)
	}
	if !ok {
		return nil, &Refusal{Status: http.StatusUnauthorized,
			Message: "a valid bearer token is required (Authorization: Bearer <token>)"}
	}
	decision, reason, err := g.authz.Authorize(r.Context(), authorizer.AttributesRecord{
		User:            res.User,
		Verb:            req.Verb,
		Namespace:       req.Namespace,
		APIGroup:        Group,
		Resource:        Resource,
		Subresource:     req.Subresource,
		Name:            req.Pool,
		ResourceRequest: true,
	})
	if err != nil && decision != authorizer.DecisionAllow {
		return nil, fmt.Errorf("reviewing %s's access: %w", res.User.GetName(), err)
	}
	if decision != authorizer.DecisionAllow {
		msg := fmt.Sprintf("%q cannot %s", res.User.GetName(), req)
		if reason != "" {
			msg += ": " + reason
		}
		return nil, &Refusal{Status: http.StatusForbidden, Message: msg}
	}
	return res.User, nil
}
