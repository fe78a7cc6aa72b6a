// Package realnode is the e2e suite on a real kubelet node (test/cluster
// RealNodes): what only a container runtime can show. It needs root, runc
// and the CNI plugins (hack/install-deps.sh); elsewhere every test skips and
// says why.
package realnode

import (
	"fmt"
	"os"
	"testing"

	"github.com/runplane/runplane/test/cluster"
)

var (
	env *cluster.Cluster
	// skip is why this machine cannot run real nodes ("" when it can).
	skip string
)

func TestMain(m *testing.M) {
	if err := cluster.RealNodeSupport(); err != nil {
		skip = err.Error()
		fmt.Fprintln(os.Stderr, "realnode: skipping every test:", skip)
		os.Exit(m.Run())
	}
	cluster.Main(m, cluster.Options{RealNodes: 1}, func(c *cluster.Cluster) { env = c })
}

// need skips t where real nodes cannot run.
func need(t *testing.T) {
	t.Helper()
	if skip != "" {
		t.Skip("no real node on this machine: " + skip)
	}
}
