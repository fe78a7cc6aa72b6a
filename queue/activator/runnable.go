package activator

import (
	"context"
	"time"
)

// Start implements manager.Runnable: it runs the activator until ctx ends
// (the manager ends it when leadership does), restarting it after a
// failure such as NATS being away, and returns only once it has drained.
func (a *Activator) Start(ctx context.Context) error {
	for ctx.Err() == nil {
		// A run ended by ctx (shutdown, a lost Lease, the shard fence) is
		// no failure, whatever step it was cancelled in.
		if err := a.Run(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Logger.Error("activator stopped; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-a.cfg.Clock.After(time.Second):
		}
	}
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the
// Lease holder dispatches.
func (a *Activator) NeedLeaderElection() bool { return true }
