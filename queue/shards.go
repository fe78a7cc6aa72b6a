package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/nats-io/nuid"
	"golang.org/x/sync/errgroup"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/queue/activator"
	"github.com/runplane/runplane/queue/shard"
)

// identity is this replica's name in the Leases: Config.Identity, or the
// host name and a random suffix (a restarted Pod is a new contender).
func identity(cfg Config) string {
	if cfg.Identity != "" {
		return cfg.Identity
	}
	h, err := os.Hostname()
	if err != nil {
		h = "runplane-queue"
	}
	return h + "-" + nuid.Next()
}

// activatorRunnable is the activator as the manager runs it. Unsharded
// (one shard): the activator itself, on the manager's Lease
// holder (with leader election, under a shard.Guard: it runs only while no
// replica of another shard count does). Sharded with leader election: a
// shard.Elector on every replica, running an activator for each shard
// whose Lease it holds; without leader election (one replica, -no-kube):
// every shard in this process.
func activatorRunnable(cfg Config, acfg activator.Config, log *slog.Logger) (manager.Runnable, error) {
	le, elect := cfg.LeaderElection, ptr.Deref(cfg.LeaderElection.LeaderElect, false) // defaulted by Run
	n := le.Shards
	var coord coordinationv1.LeasesGetter
	if elect {
		c, err := coordinationv1.NewForConfig(cfg.RESTConfig)
		if err != nil {
			return nil, fmt.Errorf("queue: lease client: %w", err)
		}
		coord = c
	}
	shardCfg := func(run func(context.Context, int) error) shard.Config {
		return shard.Config{Leases: coord, Namespace: cmp.Or(cfg.LeaseNamespace, api.DefaultNamespace), LeaderElection: le,
			Identity: cfg.Identity, Logger: log, Registerer: acfg.Registerer, Run: run}
	}
	if n < 2 {
		a, err := activator.New(acfg)
		if err != nil || !elect {
			return a, err
		}
		g, err := shard.NewGuard(shardCfg(func(ctx context.Context, _ int) error { return a.Start(ctx) }))
		if err != nil {
			return nil, fmt.Errorf("queue: %w", err)
		}
		return g, nil
	}
	acfg.Metrics = activator.NewMetrics(acfg.Registerer)
	newShard := func(i int) (*activator.Activator, error) {
		c := acfg
		c.Shard = activator.Shard{Index: i, Count: n}
		c.Logger = acfg.Logger.With("shard", i)
		return activator.New(c)
	}
	if !elect {
		var all allShards
		for i := range n {
			a, err := newShard(i)
			if err != nil {
				return nil, err
			}
			all = append(all, a)
		}
		return all, nil
	}
	el, err := shard.New(shardCfg(func(ctx context.Context, i int) error {
		a, err := newShard(i)
		if err != nil {
			return err
		}
		return a.Start(ctx)
	}))
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	return el, nil
}

// allShards runs every shard in this process (sharded without leader
// election: the one replica owns them all).
type allShards []*activator.Activator

func (all allShards) Start(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, a := range all {
		g.Go(func() error { return a.Start(ctx) })
	}
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("activator shards: %w", err)
	}
	return nil
}

// NeedLeaderElection: without leader election nothing else runs them.
func (allShards) NeedLeaderElection() bool { return false }
