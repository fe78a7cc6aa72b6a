// Package controllerstest runs runplane-controller's manager beside a
// package's tests against the test kit's cluster, as the chart runs it: one
// TestMain shape for the controllers' cluster suites.
package controllerstest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/controllers"
	"github.com/runplane/runplane/test/cluster"
)

// Main starts the cluster of opts, runs before (what must exist before the
// manager starts, e.g. the catalog; nil: nothing), starts the manager and
// runs the tests; the manager stops before the cluster does.
func Main(m *testing.M, opts cluster.Options, before func(context.Context, *cluster.Cluster) error) {
	cluster.MainWith(m, opts, func(ctx context.Context, c *cluster.Cluster) (func(bool), error) {
		if before != nil {
			if err := before(ctx, c); err != nil {
				return nil, err
			}
		}
		cfg := controllers.Config{RESTConfig: c.RESTConfig()}
		cfg.Image, cfg.Metrics.BindAddress, cfg.HealthAddr = "runplane:test", "0", "0"
		cfg.LeaderElection.LeaderElect = ptr.To(false) // one in-process instance
		mgr, err := controllers.NewManager(cfg)
		if err != nil {
			return nil, fmt.Errorf("manager: %w", err)
		}
		mctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := mgr.Start(mctx); err != nil {
				fmt.Fprintln(os.Stderr, "manager stopped:", err)
			}
		}()
		return func(bool) { cancel(); <-done }, nil
	})
}
