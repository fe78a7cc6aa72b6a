package shard

import (
	"context"
	"fmt"
	"sync/atomic"
)

// Guard runs the unsharded activator (one shard: every namespace) on the
// manager's Lease holder under the members Lease's rule, so a change of
// the shard count from or to 1 is safe like any other: the holder writes
// its entry with the count 1 and runs the activator only while 1 is the
// active count (making it so when no replica of the active count is left),
// and stops it at once when its entry has not been written for
// RenewDeadline (others may count it gone after LeaseDuration). Only the
// Lease holder writes an entry: the standbys run nothing.
type Guard struct {
	cfg     Config
	waiting *waiting
}

// NewGuard validates cfg (Shards is 1; Run runs the activator) and builds
// a Guard.
func NewGuard(cfg Config) (*Guard, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Shards != 1 {
		return nil, fmt.Errorf("shard: a Guard runs 1 shard, not %d", cfg.Shards)
	}
	g := &Guard{cfg: cfg, waiting: newWaiting()}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(g.waiting.gauge); err != nil {
			return nil, fmt.Errorf("shard: register metrics: %w", err)
		}
	}
	return g, nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: the
// manager's Lease holder runs it.
func (*Guard) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable: it returns once ctx ends and the
// activator has drained. A members entry left unwritten for RenewDeadline
// under a running activator stops the activator at once; it runs again
// after the next members write that lets it.
func (g *Guard) Start(ctx context.Context) error {
	log := g.cfg.Logger.With("component", "shard-guard", "identity", g.cfg.Identity)
	members := newMembers(g.cfg)
	var membersAt stamp
	var stopRun context.CancelFunc
	var done chan struct{} // closed once the run has drained
	var fenced atomic.Bool
	stop := func() {
		if stopRun != nil {
			stopRun()
			<-done
			stopRun, done = nil, nil
		}
	}
	defer func() {
		stop()
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.RetryPeriod)
		defer dcancel()
		if err := members.leave(dctx); err != nil {
			log.Info("leave the members Lease", "err", err)
		}
	}()
	tick := g.cfg.Clock.NewTicker(g.cfg.RetryPeriod / 2)
	defer tick.Stop()
	for {
		start := g.cfg.Clock.Now()
		v, err := members.sync(ctx)
		switch {
		case err != nil:
			log.Info("shard members", "err", err)
		case len(v.wait) > 0:
			g.waiting.set(log, 1, v.wait)
			stop()
		default:
			membersAt.set(start)
			g.waiting.set(log, 1, nil)
			if stopRun == nil {
				var runCtx context.Context
				runCtx, stopRun = context.WithCancel(ctx)
				done = make(chan struct{})
				cancel := stopRun
				go func() {
					defer close(done)
					runFenced(runCtx, cancel, g.cfg, func() {
						fenced.Store(true)
						log.Error("members entry not written within the renew deadline: stopped the activator at once", "renewDeadline", g.cfg.RenewDeadline)
					}, func() {
						if err := g.cfg.Run(runCtx, 0); err != nil {
							log.Error("activator failed", "err", err)
						}
					}, &membersAt)
				}()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-done:
			// A fenced run stopped at once; the Guard stays: the manager's
			// Lease still keeps other replicas of count 1 out, and the next
			// members write that succeeds decides again (another count may
			// have become active meanwhile: then it waits). Exiting instead
			// restarted the queue on every API stall longer than the renew
			// deadline (5.6 s by default; review finding).
			if fenced.Swap(false) {
				log.Info("the activator stopped by the fence has drained: running it again once the members entry is written")
			}
			stopRun, done = nil, nil
		case <-tick.C():
		}
	}
}
