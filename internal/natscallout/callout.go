// Package natscallout is runplane's NATS auth callout: nats-server hands
// every connecting client that is not one of runplane's own users to this
// service, which authenticates the credential the client presented (a
// worker's projected ServiceAccount token) and answers with a short-lived
// NATS user whose permissions are exactly what that worker may do.
//
// The responder is pure: it decodes the server's authorization request,
// asks an Authenticator who the client is, asks a Permit what that identity
// may publish and subscribe, and signs the answer with the issuer account
// key the server trusts (auth_callout.issuer). Serve wires it to
// $SYS.REQ.USER.AUTH.
package natscallout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"k8s.io/utils/clock"
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

// Permit says what an identity may publish and subscribe.
type Permit func(Identity) jwt.Permissions

// ErrRefused wraps every reason a connection is refused. The reason is
// logged; the client only sees a generic refusal so that probing tokens
// teaches nothing.
var ErrRefused = errors.New("refused")

// Responder answers authorization requests.
type Responder struct {
	// Issuer signs the users and the responses; its public key is the
	// server's auth_callout.issuer.
	Issuer nkeys.KeyPair
	// Account is the account the users are placed in (config mode: its
	// name, e.g. "RUNPLANE").
	Account string
	Auth    Authenticator
	Permit  Permit
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
	user, err := r.user(req, id)
	if err != nil {
		return Result{}, err
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

func (r *Responder) user(req *jwt.AuthorizationRequestClaims, id Identity) (string, error) {
	expires := id.Expires
	if limit := r.Clock.Now().Add(r.MaxTTL); r.MaxTTL > 0 && limit.Before(expires) {
		expires = limit
	}
	uc := jwt.NewUserClaims(req.UserNkey)
	uc.Name = id.Name
	uc.Audience = r.Account // config mode: the account the user is placed in
	uc.Expires = expires.Unix()
	uc.Permissions = r.Permit(id)
	// Only plain client connections: no leaf nodes or websockets that the
	// permissions were not written for.
	uc.AllowedConnectionTypes = jwt.StringList{jwt.ConnectionTypeStandard}
	s, err := uc.Encode(r.Issuer)
	if err != nil {
		return "", fmt.Errorf("signing the user of %s: %w", id.Name, err)
	}
	return s, nil
}

func (r *Responder) respond(req *jwt.AuthorizationRequestClaims, user, refusal string) ([]byte, error) {
	rc := jwt.NewAuthorizationResponseClaims(req.UserNkey)
	rc.Audience = req.Server.ID
	rc.Jwt = user
	rc.Error = refusal
	s, err := rc.Encode(r.Issuer)
	if err != nil {
		return nil, fmt.Errorf("signing the authorization response: %w", err)
	}
	return []byte(s), nil
}
