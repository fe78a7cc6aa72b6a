// Package realnode is the e2e suite on a real kubelet node (test/cluster
// RealNodes): what only a container runtime can show. It needs root, runc
// and the CNI plugins (hack/install-deps.sh); elsewhere every test skips and
// says why.
//
// The stack (test/stack): one real node (no kwok nodes), NATS with the
// queue's callout listening on the node's host address (Pods reach it
// through the node's veth), the webhook injecting the runplane image
// (imported into the node), the queue, the extender with the
// runplane-scheduler and the controllers; pool Pods' egress restricted by
// the product's AdminNetworkPolicy, which the node enforces (the stack's
// NATS, on the host's address inside the denied private ranges and no Pod,
// is an external NATS at its address: the chart's
// nats.external.egress.cidrs).
package realnode

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/runplane/runplane/controllers"
	"github.com/runplane/runplane/controllers/egress"
	"github.com/runplane/runplane/hack/images"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/natsauth"
	"github.com/runplane/runplane/test/stack"
	"github.com/runplane/runplane/webhook"
)

const ns = "e2e"

var (
	env      *cluster.Cluster
	node     *cluster.RealNode
	queueURL string
	// natsAuth is the stack's NATS trust, natsURL its address.
	natsAuth natsauth.Auth
	natsURL  string
	// egressSettings restrict pool Pods.
	egressSettings egress.Settings
	// st is the whole stack.
	st *stack.Stack
	// skip is why this machine cannot run real nodes ("" when it can).
	skip string
)

// realSpec is the catalog's GPU spec for the real node: one fake GPU and a
// sliver of its two cores, placed on the real node by the spec itself
// (nodeSelector and toleration), so GPU Pods and placeholders go there
// through the webhook like on any GPU node pool.
const realSpec = "rn1"

// realDRASpec is the catalog's DRA spec for the real node: one GPU of the
// fake DRA driver (gpu.nvidia.com, test/cluster/fakedra), claimed from the
// ResourceClaimTemplate runplane-rnd1 the controllers keep, otherwise as
// realSpec.
const realDRASpec = "rnd1"

// realNodePlacement places a spec's Pods on the real node.
const realNodePlacement = `cpu: 100m
memory: 64Mi
nodeSelector: {"` + cluster.RealNodeLabel + `": "true"}
tolerations: [{key: "` + cluster.RealNodeTaint + `", operator: Exists, effect: NoSchedule}]
`

// catalog is the GPU spec catalog of this stack (the ConfigMap the chart
// renders from gpuSpecs).
var catalog = map[string]string{
	realSpec:    "gpu: 1\n" + realNodePlacement,
	realDRASpec: "dra: {count: 1}\n" + realNodePlacement,
}

func TestMain(m *testing.M) {
	flag.Parse()
	// make unit (-short) runs no control plane; make bench runs -short too,
	// and its benchmarks here need the node.
	if testing.Short() && flag.Lookup("test.bench").Value.String() == "" {
		skip = "needs a cluster with a real node: run without -short"
		os.Exit(m.Run())
	}
	if err := cluster.RealNodeSupport(); err != nil {
		skip = err.Error()
		fmt.Fprintln(os.Stderr, "realnode: skipping every test:", skip)
		os.Exit(m.Run())
	}
	stack.Main(m, cluster.Options{RealNodes: 1, RealNodeDRA: true}, prepare, func(s *stack.Stack) {
		st, queueURL, natsAuth, natsURL, egressSettings = s, s.QueueURL, s.Auth, s.NATSURL, s.Egress
	})
}

// prepare untaints the real node, the cluster's only one: the controllers'
// Jobs and accessor Deployments carry no toleration, as on any node that
// takes ordinary Pods. Tests' own Pods keep pinning themselves to it
// (nodeSelector and toleration), which still holds.
func prepare(ctx context.Context, c *cluster.Cluster) (stack.Options, error) {
	env, node = c, c.RealNodes()[0]
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := env.Client().CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == cluster.RealNodeTaint })
		_, err = env.Client().CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return stack.Options{}, fmt.Errorf("untainting the real node: %w", err)
	}
	ctrl := &controllers.Config{}
	ctrl.Image = images.RunplaneRef
	return stack.Options{
		Namespaces: []string{ns},
		// NATS on the node's host address: the only address Pods reach.
		NATSHost: node.HostIP, Catalog: catalog, Scheduler: true,
		Controllers: ctrl,
		Webhook: func(w *webhook.Config) {
			w.Injection.Image, w.Injection.PauseImage, w.Injection.ImagePullPolicy = images.RunplaneRef, images.PauseRef, corev1.PullNever
			// The takeover tests' stock placeholders live in ns.
			w.Injection.StockNamespaces = append(w.Injection.StockNamespaces, ns)
			// The runplane-gpu policy counts only a resource no test asks
			// for: the device-plugin tests (gpu_test.go, ssh_test.go)
			// request nvidia.com/gpu directly, while takeover_test.go goes
			// through runplane.io/gpu-spec and stock (the webhook's
			// mutation, the runplane-scheduler and the extender), which
			// the policy does not change.
			w.GPUPolicy = &webhook.GPUPolicy{Resources: []string{"runplane.io/no-gpu-policy-in-this-stack"}}
		},
		Queue: func(q *queue.Config) {
			q.InsecureDisableCallerAuth, q.Namespace = true, ns
			q.HeartbeatTimeout.Duration, q.Backoff, q.Tick = 10*time.Second, 200*time.Millisecond, 200*time.Millisecond
		},
	}, nil
}

// need skips t where real nodes cannot run.
func need(t testing.TB) {
	t.Helper()
	if skip != "" {
		t.Skip("no real node on this machine: " + skip)
	}
}
