package natscallout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
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

// RevokedHold is how long an account revoked by this process is refused
// again: longer than an admission is cached (CacheOptions.TTL), so a
// deleted Pod's token that is still cached cannot bring its account back.
const RevokedHold = 3 * time.Minute

// ErrRevoked is an account revoked less than RevokedHold ago.
var ErrRevoked = errors.New("the worker's account was revoked")

// WorkerAccounts makes each worker's account once per process (Accounts):
// its key derived from the worker's name, importing exactly its subjects
// from RUNPLANE, pushed to the resolver before the worker is placed in it.
// Pushing is idempotent, so replicas and restarts may push the same account
// again. Revoke closes a worker's connections and deletes its account.
type WorkerAccounts struct {
	Trust    *natsaccounts.Trust
	Resolver Resolver
	// Connections bounds the account's connections (default
	// DefaultWorkerConnections).
	Connections int64
	// Clock times revocations (nil: the real clock).
	Clock clock.PassiveClock

	pushed  jsensure.Cache[string]
	mu      sync.Mutex
	revoked map[string]time.Time
}

// Ensure implements Accounts.
func (a *WorkerAccounts) Ensure(ctx context.Context, id Identity, subjects WorkerSubjects) (string, error) {
	key, err := a.Trust.WorkerAccount(id.Namespace, id.Pool, id.Worker)
	if err != nil {
		return "", err
	}
	if at, ok := a.revokedAt(key.Pub); ok {
		return "", fmt.Errorf("%w at %s", ErrRevoked, at.UTC().Format(time.RFC3339))
	}
	return a.pushed.Get(key.Pub, func() (string, error) {
		j, err := a.Trust.WorkerAccountJWT(a.account(key, id, subjects, 0))
		if err != nil {
			return "", err
		}
		if err := a.Resolver.Push(ctx, j); err != nil {
			return "", fmt.Errorf("pushing the account of %s: %w", id.Name, err)
		}
		return key.Pub, nil
	})
}

// Revoke closes every connection of worker ns/pool/worker (its Pod is
// gone, or no longer a worker of that pool): the account is pushed again
// revoking every user issued until now, which the server applies to the
// open connections at once, then deleted from the resolver, so a user that
// another replica's caches would still issue finds no account.
func (a *WorkerAccounts) Revoke(ctx context.Context, ns, pool, worker string) error {
	key, err := a.Trust.WorkerAccount(ns, pool, worker)
	if err != nil {
		return err
	}
	now := a.clock().Now()
	a.mu.Lock()
	if a.revoked == nil {
		a.revoked = map[string]time.Time{}
	}
	a.revoked[key.Pub] = now
	for k, at := range a.revoked {
		if now.Sub(at) > RevokedHold {
			delete(a.revoked, k)
		}
	}
	a.mu.Unlock()
	a.pushed.Forget(key.Pub)
	id := Identity{Namespace: ns, Pool: pool, Worker: worker}
	j, err := a.Trust.WorkerAccountJWT(a.account(key, id, WorkerSubjects{}, now.Unix()))
	if err != nil {
		return err
	}
	if err := a.Resolver.Push(ctx, j); err != nil {
		return fmt.Errorf("revoking the account of %s/%s/%s: %w", ns, pool, worker, err)
	}
	if err := a.Resolver.Delete(ctx, key.Pub); err != nil {
		return fmt.Errorf("deleting the account of %s/%s/%s: %w", ns, pool, worker, err)
	}
	return nil
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

func (a *WorkerAccounts) revokedAt(pub string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.revoked[pub]
	return at, ok && a.clock().Since(at) <= RevokedHold
}

func (a *WorkerAccounts) clock() clock.PassiveClock {
	if a.Clock == nil {
		return clock.RealClock{}
	}
	return a.Clock
}
