package extender

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// followLease is the runnable of FollowLease: the cache's informer on that
// one Lease (cacheOptions) wakes a follower, which binds while the Lease
// says this host's scheduler leads.
func (e *Extender) followLease(ctx context.Context) (manager.Runnable, error) {
	ns, name, _ := strings.Cut(e.cfg.LeaderElection.FollowLease, "/")
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("extender: following Lease %s: %w", e.cfg.LeaderElection.FollowLease, err)
	}
	// Readiness and Start wait for it with the cache: an extender that
	// cannot read it (RBAC, an upgrade's older Role) would never bind while
	// looking healthy.
	inf, err := e.cache.GetInformer(ctx, &coordinationv1.Lease{})
	if err != nil {
		return nil, fmt.Errorf("extender: lease informer: %w", err)
	}
	changed := make(chan struct{}, 1)
	poke := func(*coordinationv1.Lease) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(feed(poke, poke)); err != nil {
		return nil, fmt.Errorf("extender: lease informer: %w", err)
	}
	// Read from the cache (a namespaced informer is no SharedIndexInformer
	// to build a lister on), once synced: the runnable has a context.
	fl := follower{host: host, clock: e.cfg.Clock, set: e.setLeader, log: e.log,
		get: func(ctx context.Context) (*coordinationv1.Lease, error) {
			var l coordinationv1.Lease
			if err := e.cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &l); err != nil {
				return nil, err
			}
			return &l, nil
		}}
	return always(func(ctx context.Context) error {
		if !e.waitSynced(ctx) {
			return nil
		}
		fl.run(ctx, changed)
		return nil
	}), nil
}

// follower binds (set(true)) while the followed Lease is held, unexpired,
// by an identity of host: kube-scheduler's identity is "<hostname>_<uuid>".
type follower struct {
	host  string
	clock clock.Clock
	get   func(context.Context) (*coordinationv1.Lease, error)
	set   func(bool)
	log   *slog.Logger
}

// run judges the Lease whenever changed says it changed, and again when the
// term it holds runs out (a scheduler that died renews nothing, so no event
// would come), until ctx ends; then it stops binding.
func (f follower) run(ctx context.Context, changed <-chan struct{}) {
	defer f.set(false)
	for {
		lease, err := f.get(ctx)
		if err != nil && !apierrors.IsNotFound(err) { // not found: nobody leads
			f.log.Error("reading the followed Lease; not binding", "err", err)
		}
		left := f.held(lease)
		f.set(left > 0)
		var expired <-chan time.Time
		var timer clock.Timer
		if left > 0 {
			timer = f.clock.NewTimer(left)
			expired = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-expired:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// held is how long lease stays held by this host's scheduler; 0 when it
// is not.
func (f follower) held(lease *coordinationv1.Lease) time.Duration {
	if lease == nil || lease.Spec.HolderIdentity == nil || lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil ||
		!strings.HasPrefix(*lease.Spec.HolderIdentity, f.host+"_") {
		return 0
	}
	expiry := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	return max(0, expiry.Sub(f.clock.Now()))
}
