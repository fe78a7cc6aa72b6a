// Package controllerstest runs runplane-controller's manager beside a
// package's tests against the test kit's cluster, as the chart runs it: one
// TestMain shape for the controllers' cluster suites.
package controllerstest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/runplane/runplane/controllers"
	"github.com/runplane/runplane/controllers/egress"
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
		mgr, err := controllers.NewManager(controllers.Config{
			RESTConfig: c.RESTConfig(), Image: "runplane:test", MetricsAddr: "0", ProbeAddr: "0",
			Egress: egress.Settings{NATS: egress.NATSEndpoint{PodLabels: map[string]string{"app.kubernetes.io/name": "nats"}, Port: 4222}},
		})
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
