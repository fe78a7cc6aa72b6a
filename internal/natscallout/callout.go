// Package natscallout is runplane's NATS auth callout: nats-server hands
// every connecting client that is not one of runplane's own users to this
// service, which authenticates the credential the client presented (a
// worker's projected ServiceAccount token) and answers with a short-lived
// NATS user in an account of that worker's own, allowed exactly what the
// worker may do (natsaccounts: the account is the tenancy boundary).
//
// The responder decodes the server's authorization request, asks an
// Authenticator who the client is, asks its Layout for the worker's
// subjects, makes sure the worker's account (importing exactly those
// subjects from RUNPLANE) is in the server's resolver, and answers with the
// user signed by the workers' signing key, the answer signed by RUNPLANE,
// the callout's account. Serve wires it to $SYS.REQ.USER.AUTH.
package natscallout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/jwt/v2"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/internal/natsaccounts"
)

// Identity is who a client is, as far as NATS permissions go.
type Identity struct {
	// Name is what the server logs for the connection (e.g. "ns/pod").
	Name string
	// Namespace, Pool and Worker place the client in runplane's subjects.
	Namespace, Pool, Worker string
	// Expires is when the credential stops being valid; the NATS user
	// expires with it and the server closes the connection then, so the
	// client reconnects with its rotated credential.
	Expires time.Time
}

// Authenticator turns the credential a client presented into an Identity,
// or an error when the credential must be refused.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Identity, error)
}

// Layout says which subjects an identity's worker uses.
type Layout func(Identity) WorkerSubjects

// Accounts makes sure a worker's account exists in the server's resolver,
// importing exactly subjects, and returns its public key.
type Accounts interface {
	Ensure(ctx context.Context, id Identity, subjects WorkerSubjects) (string, error)
}

// ErrRefused wraps every reason a connection is refused. The reason is
// logged; the client only sees a generic refusal so that probing tokens
// teaches nothing.
var ErrRefused = errors.New("refused")

// Responder answers authorization requests.
type Responder struct {
	// Trust signs the users (the workers' signing key) and the responses
	// (RUNPLANE, the callout's account).
	Trust    *natsaccounts.Trust
	Auth     Authenticator
	Layout   Layout
	Accounts Accounts
	// MaxTTL caps a user's lifetime even when the credential lives longer.
	MaxTTL time.Duration
	Clock  clock.PassiveClock
}

// Result is one answered request: the signed response for the server, and
// what was decided, for logs and metrics.
type Result struct {
	Response []byte
	Identity Identity
	// Err is why the client was refused; nil when it was admitted.
	Err error
}

// Respond decodes the server's request and returns the signed response.
// An error return means no response can be signed at all (a request that
// does not decode, or a broken issuer key); a refusal is a Result with Err
// set and a signed error response, which the server turns into an
// authorization violation for the client.
func (r *Responder) Respond(ctx context.Context, request []byte) (Result, error) {
	req, err := jwt.DecodeAuthorizationRequestClaims(string(request))
	if err != nil {
		return Result{}, fmt.Errorf("decoding authorization request: %w", err)
	}
	id, err := r.decide(ctx, req)
	if err != nil {
		resp, encErr := r.respond(req, "", "not authorized")
		return Result{Response: resp, Identity: id, Err: err}, encErr
	}
	user, err := r.user(ctx, req, id)
	if err != nil {
		// An account that cannot be made (the resolver away) refuses this
		// connect; the sidecar reconnects and the callout tries again.
		resp, encErr := r.respond(req, "", "not authorized")
		return Result{Response: resp, Identity: id, Err: fmt.Errorf("%w: %w", ErrRefused, err)}, encErr
	}
	resp, err := r.respond(req, user, "")
	return Result{Response: resp, Identity: id}, err
}

func (r *Responder) decide(ctx context.Context, req *jwt.AuthorizationRequestClaims) (Identity, error) {
	token := req.ConnectOptions.Token
	if token == "" {
		// Clients that can only send user/password put the token there.
		token = req.ConnectOptions.Password
	}
	if token == "" {
		return Identity{}, fmt.Errorf("%w: no token presented", ErrRefused)
	}
	id, err := r.Auth.Authenticate(ctx, token)
	if err != nil {
		return id, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	now := r.Clock.Now()
	if !id.Expires.After(now) {
		return id, fmt.Errorf("%w: credential of %s expired at %s", ErrRefused, id.Name, id.Expires.UTC().Format(time.RFC3339))
	}
	return id, nil
}

func (r *Responder) user(ctx context.Context, req *jwt.AuthorizationRequestClaims, id Identity) (string, error) {
	expires := id.Expires
	if limit := r.Clock.Now().Add(r.MaxTTL); r.MaxTTL > 0 && limit.Before(expires) {
		expires = limit
	}
	subjects := r.Layout(id)
	account, err := r.Accounts.Ensure(ctx, id, subjects)
	if err != nil {
		return "", fmt.Errorf("the account of %s: %w", id.Name, err)
	}
	return r.Trust.WorkerUserJWT(account, req.UserNkey, id.Name, WorkerPermissions(subjects), jwt.NatsLimits{Subs: -1, Data: -1, Payload: -1}, expires.Unix())
}

func (r *Responder) respond(req *jwt.AuthorizationRequestClaims, user, refusal string) ([]byte, error) {
	rc := jwt.NewAuthorizationResponseClaims(req.UserNkey)
	rc.Audience = req.Server.ID
	rc.Jwt = user
	rc.Error = refusal
	s, err := rc.Encode(r.Trust.Runplane.KeyPair)
	if err != nil {
		return nil, fmt.Errorf("signing the authorization response: %w", err)
	}
	return []byte(s), nil
}
