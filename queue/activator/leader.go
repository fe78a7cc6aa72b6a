package activator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Election configures leader election on a coordination.k8s.io Lease.
type Election struct {
	Client    kubernetes.Interface
	Namespace string
	// Name of the Lease (default "runplane-queue-activator").
	Name     string
	Identity string
	// LeaseDuration, RenewDeadline, RetryPeriod default to 15s, 10s, 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Logger                                    *slog.Logger
}

// RunElected runs run while this process holds the Lease, and campaigns
// again when it loses it, until ctx ends. run's context ends when the
// leadership does.
func RunElected(ctx context.Context, e Election, run func(context.Context) error) error {
	if e.Name == "" {
		e.Name = "runplane-queue-activator"
	}
	if e.Identity == "" {
		return fmt.Errorf("leader election: identity is required")
	}
	if e.LeaseDuration == 0 {
		e.LeaseDuration, e.RenewDeadline, e.RetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
	}
	if e.Logger == nil {
		e.Logger = slog.Default()
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name},
		Client:     e.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity},
	}
	for ctx.Err() == nil {
		// The term runs here, not in client-go's callback goroutine, which
		// le.Run does not wait for: one term must have fully stopped before
		// the next campaign, or two activators would share state.
		terms := make(chan context.Context)
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   e.LeaseDuration,
			RenewDeadline:   e.RenewDeadline,
			RetryPeriod:     e.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            e.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					select {
					case terms <- lctx:
					case <-lctx.Done():
					}
				},
				OnStoppedLeading: func() { e.Logger.Info("leadership lost", "identity", e.Identity) },
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		// The campaign outlives ctx until the term has drained, so the Lease
		// is released (ReleaseOnCancel) only after run has returned: the
		// next leader never overlaps this one.
		campaignCtx, cancelCampaign := context.WithCancel(context.WithoutCancel(ctx))
		campaign := make(chan struct{})
		go func() {
			defer close(campaign)
			le.Run(campaignCtx)
		}()
		select {
		case lctx := <-terms:
			e.Logger.Info("leading", "lease", e.Namespace+"/"+e.Name, "identity", e.Identity)
			termCtx, endTerm := context.WithCancel(lctx)
			stopOnShutdown := context.AfterFunc(ctx, endTerm)
			runTerm(termCtx, e.Logger, run)
			stopOnShutdown()
			endTerm()
		case <-ctx.Done():
		}
		cancelCampaign()
		<-campaign
		select {
		case <-ctx.Done():
		case <-time.After(e.RetryPeriod):
		}
	}
	return nil
}

// runTerm keeps the activator running for the whole term: a failure (e.g.
// NATS down) is retried, not abandoned. It returns once the term has ended
// and run has returned.
func runTerm(lctx context.Context, log *slog.Logger, run func(context.Context) error) {
	for lctx.Err() == nil {
		if err := run(lctx); err != nil {
			log.Error("activator stopped; retrying", "err", err)
		}
		select {
		case <-lctx.Done():
		case <-time.After(time.Second):
		}
	}
}
