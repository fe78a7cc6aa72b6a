// Package claimauth authorizes every request to a PVC's accessor: the
// caller presents a Kubernetes bearer token, and the accessor asks the API
// server, with that very token, whether its owner may `get` the
// PersistentVolumeClaim the accessor serves (a SelfSubjectAccessReview). So
// the accessor itself holds no credential and needs no RBAC: authentication
// is the API server's (an invalid or expired token is refused with 401
// there), authorization is the tenant's ordinary RBAC on the PVC.
//
// Decisions are cached briefly (tokencache: keyed by a SHA-256 of the
// token, never the token itself, refusals apart from acceptances).
package claimauth

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/internal/httpjson"
	"github.com/runplane/runplane/internal/refusal"
	"github.com/runplane/runplane/internal/tokencache"
)

// Claim names the PVC an accessor serves.
type Claim struct {
	Namespace, Name string
}

func (c Claim) String() string {
	return fmt.Sprintf("get persistentvolumeclaims %q in namespace %q", c.Name, c.Namespace)
}

// Reviewer answers whether the owner of token may get the claim. An error
// for which apierrors.IsUnauthorized holds means the token is not valid.
type Reviewer interface {
	Review(ctx context.Context, token string, c Claim) (allowed bool, reason string, err error)
}

// SelfReviewer sends SelfSubjectAccessReviews with the caller's token
// through Client, a REST client of authorization.k8s.io/v1 configured with
// the API server's address and CA only (no credentials of its own).
type SelfReviewer struct {
	Client rest.Interface
}

// Review implements Reviewer.
func (s SelfReviewer) Review(ctx context.Context, token string, c Claim) (bool, string, error) {
	in := &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authzv1.ResourceAttributes{Verb: "get", Resource: "persistentvolumeclaims", Namespace: c.Namespace, Name: c.Name}}}
	var out authzv1.SelfSubjectAccessReview
	err := s.Client.Post().Resource("selfsubjectaccessreviews").
		SetHeader("Authorization", "Bearer "+token).Body(in).Do(ctx).Into(&out)
	if err != nil {
		return false, "", fmt.Errorf("SelfSubjectAccessReview: %w", err)
	}
	reason := out.Status.Reason
	if out.Status.EvaluationError != "" && !out.Status.Allowed {
		reason = strings.TrimSpace(reason + " " + out.Status.EvaluationError)
	}
	return out.Status.Allowed, reason, nil
}

// Options tune the cache. Zero values take the defaults.
type Options struct {
	// AllowTTL keeps a "yes" (default 10s: a revoked RoleBinding or token
	// still works this long at most), never past a JWT's exp claim.
	AllowTTL time.Duration
	// DenyTTL keeps a "no" and an invalid token (default 2s: a new
	// RoleBinding takes effect this fast; a flood of bad tokens costs one
	// review each per DenyTTL).
	DenyTTL time.Duration
	// MaxEntries bounds the allowed and the denied tokens each (default
	// 4096).
	MaxEntries int
	// Timeout bounds one review (default 5s).
	Timeout time.Duration
	// Clock drives expiry (nil: the real clock).
	Clock clock.PassiveClock
}

// Gate wraps the accessor's handler.
type Gate struct {
	claim    Claim
	reviewer Reviewer
	// cache holds nil for an allowed token.
	cache *tokencache.Cache[*refusal.Error]
	o     Options
}

// New builds a Gate for claim.
func New(claim Claim, reviewer Reviewer, o Options) (*Gate, error) {
	if claim.Namespace == "" || claim.Name == "" {
		return nil, errors.New("claimauth: the claim's namespace and name are required")
	}
	o.AllowTTL, o.DenyTTL, o.Timeout = cmp.Or(o.AllowTTL, 10*time.Second), cmp.Or(o.DenyTTL, 2*time.Second), cmp.Or(o.Timeout, 5*time.Second)
	return &Gate{claim: claim, reviewer: reviewer, cache: tokencache.New[*refusal.Error](cmp.Or(o.MaxEntries, 4096), o.Clock), o: o}, nil
}

// Check authorizes r. A *refusal.Error (401, 403) is for the caller; any
// other error means the API server could not be asked (503).
func (g *Gate) Check(r *http.Request) error {
	token, ok := tokenOf(r)
	if !ok {
		return refusal.New(http.StatusUnauthorized, "", "a bearer token is required (Authorization: Bearer <token>, or sign in a browser at %s) of a user or ServiceAccount that may %s", LoginPath, g.claim)
	}
	if ref, allowed, found := g.cache.Get(token); found {
		if allowed {
			return nil // not ref: a nil *refusal.Error is a non-nil error
		}
		return ref
	}
	ctx, cancel := context.WithTimeout(r.Context(), g.o.Timeout)
	defer cancel()
	allowed, reason, err := g.reviewer.Review(ctx, token, g.claim)
	var ref *refusal.Error
	switch {
	case err != nil && apierrors.IsUnauthorized(err):
		ref = refusal.New(http.StatusUnauthorized, "", "the bearer token was not accepted by the API server (invalid or expired)")
	case err != nil && apierrors.IsForbidden(err):
		// A cluster that lets no one review their own access.
		ref = refusal.New(http.StatusForbidden, "", "the API server refused to review the caller's access: %v", err)
	case err != nil:
		return fmt.Errorf("reviewing the caller's access: %w", err)
	case allowed:
		g.cache.Accept(token, nil, g.o.AllowTTL, time.Time{})
		return nil
	default:
		msg := "the caller cannot " + g.claim.String()
		if reason != "" {
			msg += ": " + reason
		}
		ref = refusal.New(http.StatusForbidden, "", "%s", msg)
	}
	g.cache.Refuse(token, ref, g.o.DenyTTL)
	return ref
}

// bearer extracts the token of an "Authorization: Bearer <token>" header.
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// Wrap requires Check to pass before next serves a request: 401/403 with
// the refusal, 503 when the API server cannot be asked, all JSON. It also
// serves the browser sign-in at LoginPath (login.go).
func (g *Gate) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// No page of the accessor tells another site where it was.
		w.Header().Set("Referrer-Policy", "no-referrer")
		if r.URL.Path == LoginPath {
			g.login(w, r)
			return
		}
		err := g.Check(r)
		ref, refused := errors.AsType[*refusal.Error](err)
		switch {
		case refused:
			if ref.Status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="runplane-accessor"`)
			}
			httpjson.Error(w, ref.Status, ref.Error())
		case err != nil:
			w.Header().Set("Retry-After", "5")
			httpjson.Error(w, http.StatusServiceUnavailable, fmt.Sprintf("cannot authorize the request now: %v", err))
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// RESTClient is the authorization.k8s.io/v1 client a SelfReviewer needs:
// cfg's address and CA, with every credential removed (the caller's token
// is the only one ever sent).
//
// Reviews are rate-limited client-side (20/s, bursts of 40) so a flood of
// forged tokens cannot turn the accessor into a load on the API server; a
// review that cannot start within Options.Timeout is a 503.
func RESTClient(cfg *rest.Config) (rest.Interface, error) {
	anon := rest.AnonymousClientConfig(cfg)
	anon.QPS, anon.Burst = 20, 40
	c, err := authzclient.NewForConfig(anon)
	if err != nil {
		return nil, fmt.Errorf("claimauth: API client: %w", err)
	}
	return c.RESTClient(), nil
}
