package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
)

// ErrLost is returned by Start when a shard's Lease was lost while this
// replica still ran it (neither the Lease nor the members entry written
// for RenewDeadline: the shard stopped dispatching then, before anyone
// else could take it): like a controller-runtime manager that loses its
// Lease, the replica stops, and its restart starts clean.
var ErrLost = errors.New("shard Lease lost")

// Config configures an Elector.
type Config struct {
	// Leases is the client of the Leases in Namespace.
	Leases    coordclient.LeasesGetter
	Namespace string
	// Identity names this replica (unique among the replicas).
	Identity string
	// LeaderElection: ResourceName, Shards, ShardLeaseDuration.
	LeaderElection
	// RenewDeadline, RetryPeriod: with ShardLeaseDuration, client-go leader
	// election's (default 70% and a fifth of it); a replica's members entry
	// is rewritten every RetryPeriod and counts as live for
	// ShardLeaseDuration after its last change this replica saw.
	RenewDeadline, RetryPeriod time.Duration
	// Run runs shard's activator until ctx ends and returns once it has
	// drained: only then is the shard's Lease released.
	Run    func(ctx context.Context, shard int) error
	Clock  clock.WithTicker
	Logger *slog.Logger
	// OnChange, when set, is told the shards this replica campaigns for
	// after each change.
	OnChange func(campaigned []int)
	// Registerer receives runplane_activator_shard_running and
	// runplane_activator_shard_waiting (nil: not registered).
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() Config {
	c.LeaderElection.Default()
	lease := c.ShardLeaseDuration.Duration
	c.RenewDeadline, c.RetryPeriod = cmp.Or(c.RenewDeadline, lease*7/10), cmp.Or(c.RetryPeriod, lease/5)
	c.Clock = cmp.Or[clock.WithTicker](c.Clock, clock.RealClock{})
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

// Elector runs on every replica (a manager.Runnable without leader
// election): it keeps this replica's entry in the members Lease, computes from the live
// members which shards are this replica's (Assign), campaigns for their
// Leases and runs each shard it holds; a shard another live replica
// should have is drained and then released to it.
type Elector struct {
	cfg Config
	// running is 1 for each shard whose activator runs here (client-go's
	// leader_election_master_status stays 1 after a voluntary release).
	running *prometheus.GaugeVec
	// waiting is 1 while this replica waits for the replicas of another
	// shard count to leave.
	waiting *waiting
}

// validate checks what an Elector and a Guard both need.
func (c Config) validate() error {
	switch {
	case c.Leases == nil || c.Run == nil:
		return errors.New("shard: Leases and Run are required")
	case c.Namespace == "" || c.Identity == "":
		return errors.New("shard: Namespace and Identity are required")
	case c.Shards < 1:
		return fmt.Errorf("shard: shards %d: must be at least 1", c.Shards)
	case c.RenewDeadline >= c.ShardLeaseDuration.Duration || c.RetryPeriod >= c.RenewDeadline:
		return fmt.Errorf("shard: need retry period %s < renew deadline %s < lease duration %s", c.RetryPeriod, c.RenewDeadline, c.ShardLeaseDuration.Duration)
	}
	return nil
}

// New validates cfg and builds an Elector.
func New(cfg Config) (*Elector, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &Elector{cfg: cfg, running: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "runplane_activator_shard_running",
		Help: "1 for each activator shard this replica runs (holds the shard's Lease and has not released it), else 0."}, []string{"shard"})}
	e.waiting = newWaiting()
	for s := range cfg.Shards {
		e.running.WithLabelValues(strconv.Itoa(s)).Set(0)
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{e.running, e.waiting.gauge} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("shard: register metrics: %w", err)
			}
		}
	}
	return e, nil
}

// LeaseName is shard i of n's Lease of the Elector named name. The count
// is in the name: shard i of another count holds other namespaces, and its
// Lease must never exclude (or admit) this one's owner.
func LeaseName(name string, i, n int) string {
	return name + "-" + strconv.Itoa(i) + "of" + strconv.Itoa(n)
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica runs the Elector; the shards' Leases are its own.
func (*Elector) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable. It returns once every shard it ran
// has drained and released its Lease: ErrLost if a Lease was lost under a
// running shard, nil when ctx ended.
//
// Every replica follows every shard's Lease from the start (a client-go
// elector per shard, whose Lease writes a gate lets through only for the
// shards this replica wants, or holds): client-go counts a Lease as
// expired a LeaseDuration after it saw it last change, so an elector
// started only once its shard is wanted would wait that long again.
func (e *Elector) Start(ctx context.Context) error {
	log := e.cfg.Logger.With("component", "shard-elector", "identity", e.cfg.Identity)
	lost := make(chan int, e.cfg.Shards)
	slots := make([]*slot, e.cfg.Shards)
	var wg sync.WaitGroup
	members := newMembers(e.cfg)
	var membersAt stamp // the start of the last members write that succeeded
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		// Every run drains, then every Lease held is released.
		cancel()
		wg.Wait()
		// Leaving: the others count this replica out at once.
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(parent), e.cfg.RetryPeriod)
		defer dcancel()
		if err := members.leave(dctx); err != nil {
			log.Info("leave the members Lease", "err", err)
		}
	}()
	for s := range slots {
		slots[s] = &slot{}
		wg.Go(func() { e.follow(ctx, s, slots[s], &membersAt, lost, log) })
	}
	// Twice per RetryPeriod: a dead member is seen within half of one.
	tick := e.cfg.Clock.NewTicker(e.cfg.RetryPeriod / 2)
	defer tick.Stop()
	var held []int
	for {
		start := e.cfg.Clock.Now()
		v, err := members.sync(ctx)
		if err != nil {
			log.Info("shard members", "err", err)
		} else {
			membersAt.set(start)
			e.waiting.set(log, e.cfg.Shards, v.wait)
			held = nil
			// Waiting, v.live is empty: every shard goes to "", none to this replica.
			for s, owner := range Assign(e.cfg.Shards, v.live) {
				mine := owner == e.cfg.Identity
				if slots[s].want(mine) && !mine && owner != "" {
					log.Info("handing over shard", "shard", s, "to", owner)
				}
				if mine {
					held = append(held, s)
				}
			}
			if e.cfg.OnChange != nil {
				e.cfg.OnChange(held)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case s := <-lost:
			log.Error("lost a shard's Lease while running it; stopping this replica", "shard", s)
			return fmt.Errorf("%w: %s", ErrLost, LeaseName(e.cfg.ResourceName, s, e.cfg.Shards))
		case <-tick.C():
		}
	}
}

// slot is one shard's state on this replica: whether it wants the shard,
// whether it holds its Lease, and the run to stop when it no longer wants
// it.
type slot struct {
	mu      sync.Mutex
	wanted  bool
	holding bool
	stopRun context.CancelFunc
	// renewed is the start of the last write of the Lease that made or
	// kept this replica its holder: whoever takes the Lease next saw that
	// write and waits LeaseDuration after it.
	renewed stamp
}

// stamp is a time several goroutines read and one writes.
type stamp struct{ ns atomic.Int64 }

func (s *stamp) set(t time.Time) { s.ns.Store(t.UnixNano()) }
func (s *stamp) get() time.Time  { return time.Unix(0, s.ns.Load()) }

// want sets whether this replica wants the shard; unwanted, a run under
// way is stopped (and its Lease released once it has drained). It reports
// whether the run was stopped.
func (sl *slot) want(w bool) bool {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.wanted = w
	if !w && sl.stopRun != nil {
		sl.stopRun()
		sl.stopRun = nil
		return true
	}
	return false
}

// gate lets a Lease write through when it acquires a wanted shard, renews
// a held one, or releases (an empty holder); it remembers whether this
// replica holds the Lease.
func (sl *slot) gate(holder string, id string) bool {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if holder != id {
		sl.holding = false
		return true
	}
	if sl.wanted || sl.holding {
		sl.holding = true
		return true
	}
	return false
}

// errNotWanted refuses a Lease write of a shard this replica does not want.
var errNotWanted = errors.New("shard not wanted by this replica")

// gatedLock is a Lease lock whose writes go through the slot's gate, and
// which notes when a write made or kept this replica the holder.
type gatedLock struct {
	*resourcelock.LeaseLock
	sl    *slot
	clock clock.PassiveClock
}

func (g gatedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return g.write(ctx, r, g.LeaseLock.Create)
}

func (g gatedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	return g.write(ctx, r, g.LeaseLock.Update)
}

func (g gatedLock) write(ctx context.Context, r resourcelock.LeaderElectionRecord, fn func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	if !g.sl.gate(r.HolderIdentity, g.Identity()) {
		return errNotWanted
	}
	start := g.clock.Now()
	if err := fn(ctx, r); err != nil {
		return err
	}
	if r.HolderIdentity == g.Identity() {
		g.sl.renewed.set(start)
	}
	return nil
}

// runFenced runs run with a fence beside it: once fence fires, fenced is
// told and cancel stops runCtx at once. It returns when run has returned and
// the fence has stopped, true if the fence fired.
func runFenced(runCtx context.Context, cancel context.CancelFunc, cfg Config, fenced func(), run func(), writes ...*stamp) bool {
	var fired atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		if fence(runCtx, cfg, writes...) {
			fired.Store(true)
			fenced()
			cancel()
		}
	}()
	run()
	cancel()
	<-done
	return fired.Load()
}

// fence returns true once one of the writes (a shard's Lease: its slot's
// renewed; this replica's members entry) has not succeeded for
// RenewDeadline since it last started, false when ctx ends first. The run
// must stop dispatching then: another replica may take the Lease
// LeaseDuration after the last write it saw, and may run a new shard count
// once this replica's entry has not changed for LeaseDuration. client-go
// only notices a failing renewal later (its renew loop waits a RetryPeriod
// before the RenewDeadline of retries), and the run then drains: both fit
// in LeaseDuration only by luck.
func fence(ctx context.Context, cfg Config, writes ...*stamp) bool {
	for {
		last := writes[0].get()
		for _, w := range writes[1:] {
			if t := w.get(); t.Before(last) {
				last = t
			}
		}
		wait := last.Add(cfg.RenewDeadline).Sub(cfg.Clock.Now())
		if wait <= 0 {
			return true
		}
		t := cfg.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C():
		}
	}
}

// follow runs shard s's electors until ctx ends: each follows the Lease,
// takes it when the slot wants it and it is free, runs the shard while
// holding it, and releases it only after the run has returned (renewing
// it while the run drains), so two owners never overlap; a new elector
// then follows again. A Lease lost while the run was still wanted is
// reported on lost.
func (e *Elector) follow(ctx context.Context, s int, sl *slot, membersAt *stamp, lost chan<- int, log *slog.Logger) {
	for ctx.Err() == nil {
		sl.mu.Lock()
		sl.holding = false // a lost Lease is not held
		sl.mu.Unlock()
		// Not ended by ctx: the Lease outlives the run until it has drained.
		electCtx, stopElect := context.WithCancel(context.WithoutCancel(ctx))
		leading := false
		var mu sync.Mutex
		var runs sync.WaitGroup
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: gatedLock{sl: sl, clock: e.cfg.Clock, LeaseLock: &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: LeaseName(e.cfg.ResourceName, s, e.cfg.Shards)},
				Client:     e.cfg.Leases,
				LockConfig: resourcelock.ResourceLockConfig{Identity: e.cfg.Identity},
			}},
			LeaseDuration: e.cfg.ShardLeaseDuration.Duration, RenewDeadline: e.cfg.RenewDeadline, RetryPeriod: e.cfg.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            LeaseName(e.cfg.ResourceName, s, e.cfg.Shards),
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(leadCtx context.Context) {
					runs.Add(1)
					defer runs.Done()
					defer stopElect() // release: the run has drained
					runCtx, cancel := context.WithCancel(ctx)
					defer cancel()
					mu.Lock()
					leading = true
					mu.Unlock()
					sl.mu.Lock()
					if !sl.wanted {
						sl.mu.Unlock()
						return
					}
					sl.stopRun = cancel
					sl.mu.Unlock()
					stopOnLoss := context.AfterFunc(leadCtx, cancel)
					defer stopOnLoss()
					// The lost-Lease path stops the run at once, before
					// anyone else may take the shard; the voluntary one
					// (cancel by want) drains under a renewed Lease.
					fenced := runFenced(runCtx, cancel, e.cfg, func() {
						log.Error("neither the shard Lease nor the members entry written within the renew deadline: stopped dispatching at once", "shard", s,
							"renewDeadline", e.cfg.RenewDeadline, "leaseRenewed", sl.renewed.get(), "membersWritten", membersAt.get())
					}, func() {
						log.Info("running shard", "shard", s)
						gauge := e.running.WithLabelValues(strconv.Itoa(s))
						gauge.Set(1)
						if err := e.cfg.Run(runCtx, s); err != nil {
							log.Error("shard run failed", "shard", s, "err", err)
						}
						gauge.Set(0)
					}, &sl.renewed, membersAt)
					sl.mu.Lock()
					stillWanted := sl.wanted && sl.stopRun != nil
					sl.stopRun = nil
					sl.mu.Unlock()
					if (leadCtx.Err() != nil || fenced) && stillWanted && ctx.Err() == nil {
						select {
						case lost <- s:
						default: // Start has a loss to report already
						}
					}
					log.Info("shard drained; releasing its Lease", "shard", s)
				},
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			// Only a bad config fails here, which New has checked.
			log.Error("shard leader elector", "shard", s, "err", err)
			stopElect()
			return
		}
		stop := context.AfterFunc(ctx, func() {
			mu.Lock()
			defer mu.Unlock()
			if !leading {
				stopElect()
			}
		})
		le.Run(electCtx)
		runs.Wait()
		stop()
		stopElect()
	}
}
