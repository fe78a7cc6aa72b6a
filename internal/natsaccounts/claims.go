package natsaccounts

import (
	"fmt"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// Account names, as the server logs them.
const (
	SystemAccountName   = "SYS"
	RunplaneAccountName = "RUNPLANE"
)

// OperatorJWT is the operator's self-signed JWT: the server trusts every
// account it signs.
func (t *Trust) OperatorJWT() (string, error) {
	oc := jwt.NewOperatorClaims(t.Operator.Pub)
	oc.Name = "runplane"
	oc.SystemAccount = t.System.Pub
	return encode("operator", oc, t.Operator)
}

// SystemAccountJWT is SYS: the server's own account, where the queue's
// SYS user pushes account JWTs.
func (t *Trust) SystemAccountJWT() (string, error) {
	ac := jwt.NewAccountClaims(t.System.Pub)
	ac.Name = SystemAccountName
	return encode("account SYS", ac, t.Operator)
}

// RunplaneAccountJWT is RUNPLANE: JetStream without limits of its own (the
// server's max_file_store and each stream's MaxBytes bound it), the
// exports workers import, and the auth callout, served by the queue's
// user, which may place a user in any account the operator signed.
func (t *Trust) RunplaneAccountJWT(exports jwt.Exports) (string, error) {
	ac := jwt.NewAccountClaims(t.Runplane.Pub)
	ac.Name = RunplaneAccountName
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1,
		MaxAckPending: -1, MemoryMaxStreamBytes: -1, DiskMaxStreamBytes: -1}
	ac.Exports = exports
	ac.Authorization.AuthUsers.Add(t.Queue.Pub)
	ac.Authorization.AllowedAccounts.Add(jwt.AnyAccount)
	return encode("account RUNPLANE", ac, t.Operator)
}

// WorkerAccount describes one worker's account.
type WorkerAccount struct {
	// Key is the account's key (Trust.WorkerAccount).
	Key Key
	// Name is what the server logs for the account (e.g. "ns/pool/pod").
	Name string
	// Imports are the worker's subjects, all from RUNPLANE.
	Imports jwt.Imports
	// Limits bound the account: its connections and what each may hold.
	Limits jwt.NatsLimits
	// Connections is the most connections the account may have at once.
	Connections int64
	// RevokedBefore, when not zero, revokes every user issued before it:
	// the server closes their connections when it reads the JWT.
	RevokedBefore int64
}

// WorkerAccountJWT signs a worker's account: no JetStream of its own, no
// leaf nodes, no exports, only imports.
func (t *Trust) WorkerAccountJWT(w WorkerAccount) (string, error) {
	ac := jwt.NewAccountClaims(w.Key.Pub)
	ac.Name = w.Name
	ac.Imports = w.Imports
	ac.Limits.NatsLimits = w.Limits
	ac.Limits.Conn = w.Connections
	ac.Limits.LeafNodeConn = 0
	ac.Limits.Imports = int64(len(w.Imports))
	ac.Limits.Exports = 0
	ac.Limits.WildcardExports = false
	ac.SigningKeys.Add(t.WorkerSigner.Pub)
	if w.RevokedBefore != 0 {
		ac.Revocations = jwt.RevocationList{}
		ac.Revocations[jwt.All] = w.RevokedBefore
	}
	return encode("account of "+w.Name, ac, t.Operator)
}

// WorkerUserJWT signs the user of a worker (its public nkey user, from the
// server's authorization request) in the worker's account, with the
// workers' signing key.
func (t *Trust) WorkerUserJWT(account, user, name string, perms jwt.Permissions, limits jwt.NatsLimits, expires int64) (string, error) {
	return userJWT(t.WorkerSigner, account, user, name, perms, limits, expires, false)
}

// SentinelJWT is the bearer user every client that presents no JWT of its
// own (a worker, with its ServiceAccount token) connects as: a user of
// RUNPLANE allowed nothing, which the server hands to the callout
// (default_sentinel).
func (t *Trust) SentinelJWT() (string, error) {
	var deny jwt.Permissions
	deny.Pub.Deny.Add(">")
	deny.Sub.Deny.Add(">")
	return userJWT(t.Runplane, "", t.Sentinel.Pub, "runplane-sentinel", deny, jwt.NatsLimits{Subs: -1, Data: -1, Payload: -1}, 0, true)
}

// userJWT signs a user: with the account's own key (issuerAccount "") or
// a signing key of issuerAccount.
func userJWT(signer Key, issuerAccount, user, name string, perms jwt.Permissions, limits jwt.NatsLimits, expires int64, bearer bool) (string, error) {
	uc := jwt.NewUserClaims(user)
	uc.Name = name
	uc.IssuerAccount = issuerAccount
	uc.Permissions = perms
	uc.Limits.NatsLimits = limits
	uc.Expires = expires
	uc.BearerToken = bearer
	// Plain client connections only: no leaf nodes, websockets or MQTT
	// that the permissions were not written for.
	uc.AllowedConnectionTypes = jwt.StringList{jwt.ConnectionTypeStandard}
	return encode("user "+name, uc, signer)
}

// QueueCreds are the queue's own user in RUNPLANE: every permission, the
// callout's auth user.
func (t *Trust) QueueCreds() (userJWT string, seed []byte, err error) {
	return t.creds(t.Runplane, t.Queue, "runplane-queue")
}

// SystemCreds are the queue's user in SYS, which pushes account JWTs.
func (t *Trust) SystemCreds() (userJWT string, seed []byte, err error) {
	return t.creds(t.System, t.SystemUser, "runplane-queue")
}

func (t *Trust) creds(account, user Key, name string) (string, []byte, error) {
	j, err := userJWT(account, "", user.Pub, name, jwt.Permissions{}, jwt.NatsLimits{Subs: -1, Data: -1, Payload: -1}, 0, false)
	if err != nil {
		return "", nil, err
	}
	seed, err := user.Seed()
	if err != nil {
		return "", nil, fmt.Errorf("the seed of %s: %w", name, err)
	}
	return j, seed, nil
}

// ServerConfig is the trust part of a nats-server configuration: the
// operator, the system account, the full resolver (storing account JWTs
// in resolverDir, where the queue pushes each worker's) and SYS and
// RUNPLANE preloaded, so the server knows them before the queue connects.
func (t *Trust) ServerConfig(resolverDir string, exports jwt.Exports) (string, error) {
	op, err := t.OperatorJWT()
	if err != nil {
		return "", err
	}
	sys, err := t.SystemAccountJWT()
	if err != nil {
		return "", err
	}
	rp, err := t.RunplaneAccountJWT(exports)
	if err != nil {
		return "", err
	}
	sentinel, err := t.SentinelJWT()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "operator: %q\n", op)
	fmt.Fprintf(&b, "default_sentinel: %q\n", sentinel)
	fmt.Fprintf(&b, "system_account: %q\n", t.System.Pub)
	// allow_delete: the queue deletes the account of a worker that is gone;
	// hard_delete: the file goes too (one per Pod ever admitted otherwise).
	fmt.Fprintf(&b, "resolver: { type: full, dir: %q, allow_delete: true, hard_delete: true, interval: \"2m\", timeout: \"2s\" }\n", resolverDir)
	fmt.Fprintf(&b, "resolver_preload: {\n  %s: %q\n  %s: %q\n}\n", t.System.Pub, sys, t.Runplane.Pub, rp)
	return b.String(), nil
}

type encoder interface {
	Encode(nkeys.KeyPair) (string, error)
}

func encode(what string, c encoder, signer Key) (string, error) {
	s, err := c.Encode(signer.KeyPair)
	if err != nil {
		return "", fmt.Errorf("signing the NATS %s: %w", what, err)
	}
	return s, nil
}
