package natscallout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/jwt/v2"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/internal/jsensure"
	"github.com/runplane/runplane/internal/natsaccounts"
)

// Resolver stores and deletes account JWTs in the server's resolver
// (natsaccounts.Resolver).
type Resolver interface {
	Push(ctx context.Context, accountJWT string) error
	Delete(ctx context.Context, accounts ...string) error
}

// DefaultWorkerConnections is how many connections a worker's account may
// hold at once: the sidecar's, and a reconnect that races the server
// noticing the old one is gone.
const DefaultWorkerConnections = 4

// RevokedHold is how long a revoked account is remembered as revoked:
// longer than an admission is cached (CacheOptions.TTL), so a deleted
// Pod's token that is still cached on any replica cannot bring its account
// back.
const RevokedHold = 3 * time.Minute

// PushEvery is how long a pushed account is trusted to be in the resolver
// before it is pushed again (a server that lost its resolver directory
// gets it back).
const PushEvery = 10 * time.Minute

// ErrRevoked is an account revoked less than RevokedHold ago.
var ErrRevoked = errors.New("the worker's account was revoked")

// Revocations is the cluster-wide record of revoked worker accounts (every
// queue replica admits workers; one revokes them), each kept RevokedHold.
type Revocations interface {
	Revoked(ctx context.Context, account string) (bool, error)
	Revoke(ctx context.Context, account string) error
}

// WorkerAccounts makes each worker's account (Accounts): its key derived
// from the worker's name, importing exactly its subjects from RUNPLANE,
// pushed to the resolver before the worker is placed in it, at most every
// PushEvery per process. Pushing is idempotent, so replicas and restarts
// may push the same account again. Revoke closes a worker's connections
// and deletes its account.
type WorkerAccounts struct {
	Trust       *natsaccounts.Trust
	Resolver    Resolver
	Revocations Revocations
	// Connections bounds the account's connections (default
	// DefaultWorkerConnections).
	Connections int64

	clock  clock.PassiveClock
	pushed jsensure.Cache[string]
}

// NewWorkerAccounts makes worker accounts with trust, pushed to resolver,
// revocations read from and written to revocations; clk times pushes and
// revocations (nil: the real clock).
func NewWorkerAccounts(trust *natsaccounts.Trust, resolver Resolver, revocations Revocations, clk clock.PassiveClock) *WorkerAccounts {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &WorkerAccounts{Trust: trust, Resolver: resolver, Revocations: revocations, clock: clk,
		pushed: jsensure.Cache[string]{Clock: clk, TTL: PushEvery}}
}

// Ensure implements Accounts. An account revoked (by any replica) within
// RevokedHold is refused, also when the revocation lands while this push
// is under way: it is checked before and after the push, and a push that
// raced a revocation is revoked again.
func (a *WorkerAccounts) Ensure(ctx context.Context, id Identity, subjects WorkerSubjects) (string, error) {
	key, err := a.Trust.WorkerAccount(id.Namespace, id.Pool, id.Worker)
	if err != nil {
		return "", err
	}
	if err := a.notRevoked(ctx, key.Pub); err != nil {
		a.pushed.Forget(key.Pub)
		return "", err
	}
	pub, err := a.pushed.Get(key.Pub, func() (string, error) {
		j, err := a.Trust.WorkerAccountJWT(a.account(key, id, subjects, 0))
		if err != nil {
			return "", err
		}
		if err := a.Resolver.Push(ctx, j); err != nil {
			return "", fmt.Errorf("pushing the account of %s: %w", id.Name, err)
		}
		if err := a.notRevoked(ctx, key.Pub); err != nil {
			// Revoked while this push was under way: it may have undone
			// the revocation, so revoke again.
			return "", errors.Join(err, a.revokeAccount(ctx, key, id))
		}
		return key.Pub, nil
	})
	if err != nil {
		a.pushed.Forget(key.Pub) // a revocation is the record's to answer, not a cached failure's
	}
	return pub, err
}

func (a *WorkerAccounts) notRevoked(ctx context.Context, pub string) error {
	revoked, err := a.Revocations.Revoked(ctx, pub)
	switch {
	case err != nil:
		return fmt.Errorf("reading the revocations: %w", err)
	case revoked:
		return ErrRevoked
	}
	return nil
}

// Revoke closes every connection of worker ns/pool/worker (its Pod is
// gone, or no longer a worker of that pool): the revocation is recorded
// for every replica first, then the account is pushed again revoking every
// user issued until now, which the server applies to the open connections
// at once, and deleted from the resolver. Each step runs even when one
// fails; the caller retries until all succeed.
func (a *WorkerAccounts) Revoke(ctx context.Context, ns, pool, worker string) error {
	key, err := a.Trust.WorkerAccount(ns, pool, worker)
	if err != nil {
		return err
	}
	a.pushed.Forget(key.Pub)
	recorded := a.Revocations.Revoke(ctx, key.Pub)
	if recorded != nil {
		recorded = fmt.Errorf("recording the revocation of %s/%s/%s: %w", ns, pool, worker, recorded)
	}
	return errors.Join(recorded, a.revokeAccount(ctx, key, Identity{Namespace: ns, Pool: pool, Worker: worker}))
}

func (a *WorkerAccounts) revokeAccount(ctx context.Context, key natsaccounts.Key, id Identity) error {
	name := id.Namespace + "/" + id.Pool + "/" + id.Worker
	var pushed error
	j, err := a.Trust.WorkerAccountJWT(a.account(key, id, WorkerSubjects{}, a.clock.Now().Unix()))
	if err == nil {
		err = a.Resolver.Push(ctx, j)
	}
	if err != nil {
		pushed = fmt.Errorf("revoking the account of %s: %w", name, err)
	}
	deleted := a.Resolver.Delete(ctx, key.Pub)
	if deleted != nil {
		deleted = fmt.Errorf("deleting the account of %s: %w", name, deleted)
	}
	return errors.Join(pushed, deleted)
}

func (a *WorkerAccounts) account(key natsaccounts.Key, id Identity, subjects WorkerSubjects, revokedBefore int64) natsaccounts.WorkerAccount {
	w := natsaccounts.WorkerAccount{
		Key: key, Name: id.Namespace + "/" + id.Pool + "/" + id.Worker,
		Connections: cmp.Or(a.Connections, DefaultWorkerConnections),
		// The account's own bounds are its user's (Responder.user).
		Limits:        jwt.NatsLimits{Subs: -1, Data: -1, Payload: -1},
		RevokedBefore: revokedBefore,
	}
	if subjects.Stream != "" {
		w.Imports = WorkerImports(subjects, a.Trust.Runplane.Pub)
	}
	return w
}
