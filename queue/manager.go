package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/logging"
	"github.com/runplane/runplane/queue/pool"
)

// DefaultListen is the ingress address (Config.Listen, the configuration
// file's listen).
const DefaultListen = ":8080"

// NewManager builds the controller-runtime manager that runs the ingress on
// every replica and the activator (a leader-election Runnable) on the Lease
// holder. The Lease is released only after the activator has drained
// (LeaderElectionReleaseOnCancel, no shutdown timeout), so the next leader
// never overlaps it. /healthz and /readyz stay on the ingress port, where
// the chart's probes expect them, and /metrics has a listener of its own
// (Config.MetricsListen): the manager's own metrics and probe listeners are
// off.
//
// Its cache keeps what the queue watches (pool.CacheOptions: the pools'
// Deployments, ReplicaSets and Pods of Config.Namespace). Run adds the
// ingress and the activator to it; tests add their own Runnables.
func NewManager(cfg Config) (manager.Manager, error) {
	if cfg.RESTConfig == nil {
		return nil, errors.New("queue: manager needs a Kubernetes config")
	}
	opts := manager.Options{
		Logger:                  logging.Manager(cmp.Or(cfg.Logger, slog.Default())),
		Cache:                   pool.CacheOptions(cfg.Namespace),
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		GracefulShutdownTimeout: ptr.To[time.Duration](-1),
	}
	if ptr.Deref(cfg.LeaderElection.LeaderElect, false) {
		id := identity(cfg)
		le := cfg.LeaderElection
		le.Default()
		ns, name := cmp.Or(cfg.LeaseNamespace, api.DefaultNamespace), le.ResourceName
		coord, err := coordinationv1.NewForConfig(cfg.RESTConfig)
		if err != nil {
			return nil, fmt.Errorf("queue: lease client: %w", err)
		}
		opts.LeaderElection, opts.LeaderElectionReleaseOnCancel = true, true
		opts.LeaderElectionID, opts.LeaderElectionNamespace = name, ns
		// A Lease lock of our own keeps Config.Identity (the chart passes
		// none; tests name their contenders).
		opts.LeaderElectionResourceLockInterface = &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
			Client:     coord,
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		}
	}
	mgr, err := manager.New(cfg.RESTConfig, opts)
	if err != nil {
		return nil, fmt.Errorf("queue: manager: %w", err)
	}
	return mgr, nil
}

// runAll runs runnables without Kubernetes (-no-kube) until ctx ends or
// one fails, and returns once all have returned.
func runAll(ctx context.Context, runnables []manager.Runnable) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, r := range runnables {
		g.Go(func() error { return r.Start(ctx) })
	}
	return g.Wait()
}
