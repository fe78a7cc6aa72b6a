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
// LeaseDuration + RetryPeriod (12 s) plus the new owner's rebuild.
const (
	DefaultLeaseDuration = 10 * time.Second
	DefaultRenewDeadline = 7 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
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
	// OnChange, when set, is told the shards this replica runs after each
	// change (tests, metrics).
	OnChange func(held []int)
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
	return &Elector{cfg: cfg}, nil
}

// LeaseName is shard i's Lease of the Elector named name.
func LeaseName(name string, i int) string { return name + "-" + strconv.Itoa(i) }

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica runs the Elector; the shards' Leases are its own.
func (*Elector) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable. It returns once every shard it ran
// has drained and released its Lease: ErrLost if a Lease was lost under a
// running shard, nil when ctx ended.
func (e *Elector) Start(ctx context.Context) error {
	log := e.cfg.Logger.With("component", "shard-elector", "identity", e.cfg.Identity)
	lost := make(chan int, e.cfg.Shards)
	running := map[int]*campaign{}
	stopping := map[int]*campaign{}
	members := newMembers(e.cfg)
	defer func() {
		for _, c := range running {
			c.stopRun()
		}
		for _, c := range running {
			<-c.done
		}
		for _, c := range stopping {
			<-c.done
		}
		// Leaving: the others count this replica out at once.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.RetryPeriod)
		defer cancel()
		if err := members.leave(dctx); err != nil {
			log.Info("leave the members Lease", "err", err)
		}
	}()
	tick := e.cfg.Clock.NewTicker(e.cfg.RetryPeriod)
	defer tick.Stop()
	var held []int
	for {
		for s, c := range stopping {
			select {
			case <-c.done:
				delete(stopping, s)
			default:
			}
		}
		live, err := members.sync(ctx)
		if err != nil {
			log.Info("shard members", "err", err)
		}
		if err == nil {
			want := Assign(e.cfg.Shards, live)
			for s, owner := range want {
				c := running[s]
				switch {
				case owner == e.cfg.Identity && c == nil && stopping[s] == nil:
					c, err := e.campaign(ctx, s, lost, log)
					if err != nil {
						return err
					}
					running[s] = c
				case owner != e.cfg.Identity && c != nil:
					log.Info("handing over shard", "shard", s, "to", owner)
					c.stopRun()
					stopping[s] = c
					delete(running, s)
				}
			}
		}
		if now := e.heldOf(running); !slicesEqual(now, held) {
			held = now
			log.Info("shards campaigned for", "shards", held)
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

func (e *Elector) heldOf(running map[int]*campaign) []int {
	var out []int
	for s := range e.cfg.Shards {
		if running[s] != nil {
			out = append(out, s)
		}
	}
	return out
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// campaign is one shard's leader election and, while it leads, its run.
type campaign struct {
	// stopRun ends the shard's run (and the campaign once the run has
	// drained, or at once when it never led).
	stopRun func()
	// done is closed once the run has returned and the Lease is released.
	done chan struct{}
}

// campaign contends for shard s's Lease and runs the shard while holding
// it. The Lease is released only after the run has returned (it is renewed
// while the run drains), so two owners never overlap; a Lease lost while
// the run was still wanted is reported on lost.
func (e *Elector) campaign(ctx context.Context, s int, lost chan<- int, log *slog.Logger) (*campaign, error) {
	runCtx, stopRun := context.WithCancel(ctx)
	// Not ended by ctx: the Lease outlives the run until it has drained.
	electCtx, stopElect := context.WithCancel(context.WithoutCancel(ctx))
	c := &campaign{stopRun: stopRun, done: make(chan struct{})}
	var mu sync.Mutex
	leading := false
	var runs sync.WaitGroup
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: LeaseName(e.cfg.Name, s)},
			Client:     e.cfg.Leases,
			LockConfig: resourcelock.ResourceLockConfig{Identity: e.cfg.Identity},
		},
		LeaseDuration: e.cfg.LeaseDuration, RenewDeadline: e.cfg.RenewDeadline, RetryPeriod: e.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            LeaseName(e.cfg.Name, s),
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leadCtx context.Context) {
				mu.Lock()
				if runCtx.Err() != nil {
					mu.Unlock()
					stopElect()
					return
				}
				leading = true
				runs.Add(1)
				mu.Unlock()
				defer runs.Done()
				log.Info("running shard", "shard", s)
				ctx, cancel := context.WithCancel(runCtx)
				stopOnLoss := context.AfterFunc(leadCtx, cancel)
				if err := e.cfg.Run(ctx, s); err != nil {
					log.Error("shard run failed", "shard", s, "err", err)
				}
				stopOnLoss()
				cancel()
				if leadCtx.Err() != nil && runCtx.Err() == nil {
					select {
					case lost <- s:
					default: // Start has another loss to report already
					}
				}
				log.Info("shard drained; releasing its Lease", "shard", s)
				stopElect()
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		stopRun()
		stopElect()
		return nil, fmt.Errorf("shard %d: leader elector: %w", s, err)
	}
	context.AfterFunc(runCtx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !leading {
			stopElect()
		}
	})
	go func() {
		defer close(c.done)
		le.Run(electCtx)
		runs.Wait()
		stopElect()
	}()
	return c, nil
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
