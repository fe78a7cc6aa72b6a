package shard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
)

// Default Lease timings: a SIGKILLed replica's shards are taken within
// about LeaseDuration + 2 RetryPeriods (11 s at most, 9–10 s typically),
// plus the new owner's rebuild.
const (
	DefaultLeaseDuration = 8 * time.Second
	DefaultRenewDeadline = 5600 * time.Millisecond
	DefaultRetryPeriod   = 1600 * time.Millisecond
)

// ErrLost is returned by Start when a shard's Lease was lost while this
// replica still ran it (renewals failed for RenewDeadline): like a
// controller-runtime manager that loses its Lease, the replica stops, and
// its restart starts clean.
var ErrLost = errors.New("shard Lease lost")

// Config configures an Elector.
type Config struct {
	// Leases is the client of the Leases: the shards' <Name>-<i> and the
	// members Lease <Name>-members.
	Leases          coordclient.LeasesGetter
	Namespace, Name string
	// Identity names this replica (unique among the replicas).
	Identity string
	// Shards is the number of shards (at least 1).
	Shards int
	// LeaseDuration, RenewDeadline, RetryPeriod: client-go leader
	// election's, for each shard's Lease; a replica's members entry is
	// rewritten every RetryPeriod and counts as live for LeaseDuration
	// after its last change this replica saw.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Run runs shard's activator until ctx ends and returns once it has
	// drained: only then is the shard's Lease released.
	Run    func(ctx context.Context, shard int) error
	Clock  clock.WithTicker
	Logger *slog.Logger
	// OnChange, when set, is told the shards this replica campaigns for
	// after each change.
	OnChange func(campaigned []int)
	// Registerer receives runplane_activator_shard_running (nil: not
	// registered).
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() Config {
	c.LeaseDuration = cmp.Or(c.LeaseDuration, DefaultLeaseDuration)
	c.RenewDeadline = cmp.Or(c.RenewDeadline, DefaultRenewDeadline)
	c.RetryPeriod = cmp.Or(c.RetryPeriod, DefaultRetryPeriod)
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
}

// New validates cfg and builds an Elector.
func New(cfg Config) (*Elector, error) {
	cfg = cfg.withDefaults()
	switch {
	case cfg.Leases == nil || cfg.Run == nil:
		return nil, errors.New("shard: Leases and Run are required")
	case cfg.Name == "" || cfg.Namespace == "" || cfg.Identity == "":
		return nil, errors.New("shard: Namespace, Name and Identity are required")
	case cfg.Shards < 1:
		return nil, fmt.Errorf("shard: shards %d: must be at least 1", cfg.Shards)
	case cfg.RenewDeadline >= cfg.LeaseDuration || cfg.RetryPeriod >= cfg.RenewDeadline:
		return nil, fmt.Errorf("shard: need retry period %s < renew deadline %s < lease duration %s", cfg.RetryPeriod, cfg.RenewDeadline, cfg.LeaseDuration)
	}
	e := &Elector{cfg: cfg, running: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "runplane_activator_shard_running",
		Help: "1 for each activator shard this replica runs (holds the shard's Lease and has not released it), else 0."}, []string{"shard"})}
	for s := range cfg.Shards {
		e.running.WithLabelValues(strconv.Itoa(s)).Set(0)
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(e.running); err != nil {
			return nil, fmt.Errorf("shard: register metrics: %w", err)
		}
	}
	return e, nil
}

// LeaseName is shard i's Lease of the Elector named name.
func LeaseName(name string, i int) string { return name + "-" + strconv.Itoa(i) }

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
		wg.Go(func() { e.follow(ctx, s, slots[s], lost, log) })
	}
	// Twice per RetryPeriod: a dead member is seen within half of one.
	tick := e.cfg.Clock.NewTicker(e.cfg.RetryPeriod / 2)
	defer tick.Stop()
	var held []int
	for {
		live, err := members.sync(ctx)
		if err != nil {
			log.Info("shard members", "err", err)
		} else {
			held = nil
			for s, owner := range Assign(e.cfg.Shards, live) {
				mine := owner == e.cfg.Identity
				if slots[s].want(mine) && !mine {
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
			return fmt.Errorf("%w: %s", ErrLost, LeaseName(e.cfg.Name, s))
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
}

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

// gatedLock is a Lease lock whose writes go through the slot's gate.
type gatedLock struct {
	*resourcelock.LeaseLock
	sl *slot
}

func (g gatedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	if !g.sl.gate(r.HolderIdentity, g.Identity()) {
		return errNotWanted
	}
	return g.LeaseLock.Create(ctx, r)
}

func (g gatedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	if !g.sl.gate(r.HolderIdentity, g.Identity()) {
		return errNotWanted
	}
	return g.LeaseLock.Update(ctx, r)
}

// follow runs shard s's electors until ctx ends: each follows the Lease,
// takes it when the slot wants it and it is free, runs the shard while
// holding it, and releases it only after the run has returned (renewing
// it while the run drains), so two owners never overlap; a new elector
// then follows again. A Lease lost while the run was still wanted is
// reported on lost.
func (e *Elector) follow(ctx context.Context, s int, sl *slot, lost chan<- int, log *slog.Logger) {
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
			Lock: gatedLock{sl: sl, LeaseLock: &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: LeaseName(e.cfg.Name, s)},
				Client:     e.cfg.Leases,
				LockConfig: resourcelock.ResourceLockConfig{Identity: e.cfg.Identity},
			}},
			LeaseDuration: e.cfg.LeaseDuration, RenewDeadline: e.cfg.RenewDeadline, RetryPeriod: e.cfg.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            LeaseName(e.cfg.Name, s),
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
					log.Info("running shard", "shard", s)
					gauge := e.running.WithLabelValues(strconv.Itoa(s))
					gauge.Set(1)
					if err := e.cfg.Run(runCtx, s); err != nil {
						log.Error("shard run failed", "shard", s, "err", err)
					}
					gauge.Set(0)
					sl.mu.Lock()
					stillWanted := sl.wanted && sl.stopRun != nil
					sl.stopRun = nil
					sl.mu.Unlock()
					if leadCtx.Err() != nil && stillWanted && ctx.Err() == nil {
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

// members keeps this replica's entry in the members Lease <Name>-members
// and reads the others': one object, updated by compare-and-set, so RBAC
// can name every Lease the queue may touch. Each replica's entry is an
// annotation m.runplane.io/<hash of its identity> = "<identity> <its
// clock>", rewritten every RetryPeriod; an entry counts as live for
// LeaseDuration after this replica saw it change (by its own clock: no
// comparison of two machines' clocks).
type members struct {
	cfg  Config
	seen map[string]seenEntry
}

type seenEntry struct {
	value    string
	observed time.Time
}

// memberPrefix starts each member's annotation key.
const memberPrefix = "m.runplane.io/"

func newMembers(cfg Config) *members { return &members{cfg: cfg, seen: map[string]seenEntry{}} }

// MembersLeaseName is the members Lease of the Elector named name.
func MembersLeaseName(name string) string { return name + "-members" }

func (m *members) key() string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(m.cfg.Identity))
	return fmt.Sprintf("%s%016x", memberPrefix, h.Sum64())
}

// sync writes this replica's entry and returns the live members'
// identities (this one included).
func (m *members) sync(ctx context.Context) ([]string, error) {
	now := m.cfg.Clock.Now()
	var live []string
	err := m.update(ctx, func(ann map[string]string) {
		ann[m.key()] = m.cfg.Identity + " " + now.UTC().Format(time.RFC3339Nano)
		live = m.live(ann, now)
	})
	if err != nil {
		return nil, err
	}
	return live, nil
}

// live reads the entries: the live ones' identities; those dead for long
// (a SIGKILLed replica, its name never back) are removed from ann.
func (m *members) live(ann map[string]string, now time.Time) []string {
	live := []string{m.cfg.Identity}
	seen := make(map[string]seenEntry, len(ann))
	for k, v := range ann {
		id, _, ok := strings.Cut(v, " ")
		if !strings.HasPrefix(k, memberPrefix) || !ok || k == m.key() {
			continue
		}
		e, known := m.seen[k]
		if !known || e.value != v {
			e = seenEntry{value: v, observed: now}
		}
		switch age := now.Sub(e.observed); {
		case age <= m.cfg.LeaseDuration:
			live = append(live, id)
		case age > 30*m.cfg.LeaseDuration:
			delete(ann, k)
			continue
		}
		seen[k] = e
	}
	m.seen = seen
	return live
}

// update applies fn to the members Lease's annotations (made when
// missing), retrying on conflicts.
func (m *members) update(ctx context.Context, fn func(ann map[string]string)) error {
	leases := m.cfg.Leases.Leases(m.cfg.Namespace)
	name := MembersLeaseName(m.cfg.Name)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			l = &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.cfg.Namespace, Annotations: map[string]string{}}}
			fn(l.Annotations)
			_, err = leases.Create(ctx, l, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(coordv1.Resource("leases"), name, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		fn(l.Annotations)
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("members Lease %s: %w", name, err)
	}
	return nil
}

// leave removes this replica's entry.
func (m *members) leave(ctx context.Context) error {
	return m.update(ctx, func(ann map[string]string) { delete(ann, m.key()) })
}
