// Package helmnode installs the Helm chart with `helm install` into a
// cluster of its own with one real kubelet node (test/cluster RealNodes),
// every component running from the images hack/images builds, and makes
// one invocation through it (the chart's `helm test`). It needs root, runc
// and the CNI plugins (hack/install-deps.sh); elsewhere every test skips
// and says why.
//
// The realnode suite runs runplane in-process; the chart gets a cluster of
// its own so its webhooks and policies meet no in-process twin.
package helmnode

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/runplane/runplane/hack/images"
	"github.com/runplane/runplane/test/cluster"
)

var (
	env *cluster.Cluster
	// skip is why this machine cannot run real nodes ("" when it can).
	skip string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		skip = "needs a cluster with a real node: run without -short"
		os.Exit(m.Run())
	}
	if err := cluster.RealNodeSupport(); err != nil {
		skip = err.Error()
		fmt.Fprintln(os.Stderr, "helmnode: skipping every test:", skip)
		os.Exit(m.Run())
	}
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	bin, err := cluster.Binaries(ctx)
	if err != nil {
		logf("helmnode: %v", err)
		return 1
	}
	c, err := cluster.Start(ctx, cluster.Options{
		RealNodes: 1, Logf: logf, Dir: os.Getenv("RUNPLANE_E2E_DIR"),
		// The third-party images the chart runs, from the pinned binaries
		// of test/testbin (nothing is pulled on the node).
		ExtraImages: func(tmp string) ([]images.Image, error) {
			nats, err := images.NATS(tmp, filepath.Join(bin, "nats-server"))
			if err != nil {
				return nil, err
			}
			sched, err := images.KubeScheduler(tmp, filepath.Join(bin, "kube-scheduler"))
			return []images.Image{nats, sched}, err
		},
	})
	if err != nil {
		logf("cluster: %v", err)
		return 1
	}
	defer c.Stop()
	env = c
	code := m.Run()
	if code != 0 {
		c.DumpLogs(logf, 60)
	}
	return code
}

func needNode(t *testing.T) {
	t.Helper()
	if skip != "" {
		t.Skip(skip)
	}
}
