package activator

import (
	"context"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Start implements manager.Runnable: it runs the activator until ctx ends
// (the manager ends it when leadership does), restarting it after a
// failure such as NATS being away, and returns only once it has drained.
// Failures in a row wait 1 s, 2 s, 4 s, then 5 s between runs: a fault
// that does not clear (a rebuild that cannot read a message fails the run,
// review of the purges) logs every 5 s, not every second, and a NATS
// outage is still followed within 5 s of its end. A run that lasted a
// minute starts the count again.
func (a *Activator) Start(ctx context.Context) error {
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Cap: 5 * time.Second, Steps: math.MaxInt32}
	next := backoff
	for ctx.Err() == nil {
		began := a.cfg.Clock.Now()
		// A run ended by ctx (shutdown, a lost Lease, the shard fence) is
		// no failure, whatever step it was cancelled in.
		err := a.Run(ctx)
		if err != nil && ctx.Err() == nil {
			a.cfg.Logger.Error("activator stopped; retrying", "err", err)
		}
		if err == nil || a.cfg.Clock.Since(began) > time.Minute {
			next = backoff
		}
		select {
		case <-ctx.Done():
		case <-a.cfg.Clock.After(next.Step()):
		}
	}
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the
// Lease holder dispatches.
func (a *Activator) NeedLeaderElection() bool { return true }
