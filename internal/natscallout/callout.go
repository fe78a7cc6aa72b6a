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
	"fmt"
	"time"

	"github.com/nats-io/jwt/v2"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/internal/natsaccounts"
	"github.com/runplane/runplane/internal/refusal"
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
	// Concurrency is how many invocations the worker runs at once (its
	// Pod's runplane.io/concurrency; 0 counts as 1): its sidecar pulls
	// with that many subscriptions at once (Limits.Subscriptions).
	Concurrency int
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
	// Limits bound each user's connection (zero fields: the defaults).
	Limits Limits
	Clock  clock.PassiveClock
}

// Limits bound one worker connection: the user JWT's limits, which
// nats-server applies to a callout user since v2.15.3 (and v2.14.10);
// older servers registered the user with its permissions only and ignore
// them. The server's own max_payload and max_subscriptions still apply
// on top (the smaller bound wins).
type Limits struct {
	// Subscriptions bounds the subscriptions a connection holds at once,
	// on top of one per unit of the worker's concurrency: the sidecar
	// holds one subscription per pull under way (each of its concurrency
	// slots pulls on its own, up to 1024) and a few of its own (its
	// cancels, its request inbox, the pull that hands work back while it
	// drains). A subscription beyond is refused ("maximum subscriptions
	// exceeded"); the connection stays. Without a bound, one connection
	// could hold millions, each costing the server memory and every
	// publish in the account a longer match. Default
	// DefaultSubscriptions; NoLimit: unbounded.
	Subscriptions int64
	// Payload bounds one message the connection publishes, headers
	// included. The server closes a connection that sends more, and
	// tells the client the bound in the INFO after connect, which the
	// sidecar sizes its result messages and object chunks by
	// (nats.Conn.MaxPayload). Default DefaultPayload; NoLimit: only the
	// server's max_payload.
	Payload int64
}

const (
	// DefaultSubscriptions leaves a sidecar, beyond its pulls, some 15
	// times the 3 or 4 subscriptions it holds.
	DefaultSubscriptions = 64
	// DefaultPayload is nats-server's default max_payload (1 MiB).
	DefaultPayload = 1 << 20
	// NoLimit turns a limit off.
	NoLimit = jwt.NoLimit
)

// limitOr is v, def when v is zero, NoLimit when v is negative.
func limitOr(v, def int64) int64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return NoLimit
	}
	return v
}

// maxConcurrency is the largest runplane.io/concurrency the webhook admits
// (webhook/mutate.MaxConcurrency): a Pod claiming more gets no more
// subscriptions than that.
const maxConcurrency = 1024

// nats is the user JWT's limits for id.
func (l Limits) nats(id Identity) jwt.NatsLimits {
	subs := limitOr(l.Subscriptions, DefaultSubscriptions)
	if subs != NoLimit {
		subs += int64(min(max(id.Concurrency, 1), maxConcurrency))
	}
	payload := limitOr(l.Payload, DefaultPayload)
	// Data stays unbounded: nats-server keeps no per-user byte count
	// (NatsLimits.Data is not read for users), so a bound here would be
	// a promise nothing keeps. What a worker stores is bounded by the
	// streams' and buckets' limits instead.
	return jwt.NatsLimits{Subs: subs, Payload: payload, Data: NoLimit}
}

// Result is one answered request: the signed response for the server, and
// what was decided, for logs and metrics.
type Result struct {
	Response []byte
	Identity Identity
	// Err is why the client was refused (Reason), for the log; nil when
	// it was admitted. The client only sees a generic refusal, so that
	// probing tokens teaches nothing.
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
		return Result{Response: resp, Identity: id, Err: err}, encErr
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
		return Identity{}, refusal.New(0, ReasonOther, "no token presented")
	}
	id, err := r.Auth.Authenticate(ctx, token)
	if err != nil {
		return id, err
	}
	now := r.Clock.Now()
	if !id.Expires.After(now) {
		return id, refusal.New(0, ReasonOther, "credential of %s expired at %s", id.Name, id.Expires.UTC().Format(time.RFC3339))
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
	return r.Trust.WorkerUserJWT(account, req.UserNkey, id.Name, WorkerPermissions(subjects), r.Limits.nats(id), expires.Unix())
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
