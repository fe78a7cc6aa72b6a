package natscallout

import (
	"cmp"
	"context"
	"fmt"

	"github.com/nats-io/jwt/v2"

	"github.com/runplane/runplane/internal/jsensure"
	"github.com/runplane/runplane/internal/natsaccounts"
)

// Pusher stores an account JWT in the server's resolver
// (natsaccounts.Resolver).
type Pusher interface {
	Push(ctx context.Context, accountJWT string) error
}

// DefaultWorkerConnections is how many connections a worker's account may
// hold at once: the sidecar's, and a reconnect that races the server
// noticing the old one is gone.
const DefaultWorkerConnections = 4

// WorkerAccounts makes each worker's account once per process (Accounts):
// its key derived from the worker's name, importing exactly its subjects
// from RUNPLANE, pushed to the resolver before the worker is placed in it.
// Pushing is idempotent, so replicas and restarts may push the same account
// again.
type WorkerAccounts struct {
	Trust    *natsaccounts.Trust
	Resolver Pusher
	// Connections bounds the account's connections (default
	// DefaultWorkerConnections).
	Connections int64

	pushed jsensure.Cache[string]
}

// Ensure implements Accounts.
func (a *WorkerAccounts) Ensure(ctx context.Context, id Identity, subjects WorkerSubjects) (string, error) {
	key, err := a.Trust.WorkerAccount(id.Namespace, id.Pool, id.Worker)
	if err != nil {
		return "", err
	}
	return a.pushed.Get(key.Pub, func() (string, error) {
		j, err := a.Trust.WorkerAccountJWT(natsaccounts.WorkerAccount{
			Key: key, Name: id.Namespace + "/" + id.Pool + "/" + id.Worker,
			Imports:     WorkerImports(subjects, a.Trust.Runplane.Pub),
			Connections: cmp.Or(a.Connections, DefaultWorkerConnections),
			// The account's own bounds are its user's (Responder.user).
			Limits: jwt.NatsLimits{Subs: -1, Data: -1, Payload: -1},
		})
		if err != nil {
			return "", err
		}
		if err := a.Resolver.Push(ctx, j); err != nil {
			return "", fmt.Errorf("pushing the account of %s: %w", id.Name, err)
		}
		return key.Pub, nil
	})
}
