package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/controllers"
	"github.com/runplane/runplane/hack/images"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/localworkers"
	"github.com/runplane/runplane/test/stack"
)

type config struct {
	nodes, gpusPerNode int
	dir                string
	queuePort          int
	realNodes          int
}

// natsServers is the chart's nats.bundled.replicas (and queue stream
// replicas) by default: its NATS runs three servers, streams and buckets
// at three replicas.
const natsServers = 3

// defaultCatalog is the GPU spec catalog make dev installs.
var defaultCatalog = map[string]string{
	"g1.1": "gpu: 1\ncpu: \"4\"\nmemory: 16Gi\n",
	"g1.2": "gpu: 2\ncpu: \"8\"\nmemory: 32Gi\n",
	"g1.8": "gpu: 8\ncpu: \"32\"\nmemory: 128Gi\nstock: Required\n",
}

func run(ctx context.Context, cfg config) error {
	began := time.Now()
	dir, err := filepath.Abs(cfg.dir)
	if err != nil {
		return err
	}
	// A previous run's state is stale: its processes are gone.
	if err := os.RemoveAll(filepath.Join(dir, "cluster")); err != nil {
		return fmt.Errorf("cleaning %s: %w", dir, err)
	}
	nodes := make([]cluster.Node, cfg.nodes)
	for i := range nodes {
		nodes[i] = cluster.Node{Name: fmt.Sprintf("gpu-node-%d", i), GPUs: cfg.gpusPerNode, Labels: map[string]string{"runplane.io/gpu-node": "true"}}
	}
	realNodes := realNodesFor(ctx, cfg.realNodes)
	fmt.Println("dev: starting the local control plane (the first run builds the binaries: ~10 minutes)")
	c, err := cluster.Start(ctx, cluster.Options{
		Nodes: nodes, Dir: filepath.Join(dir, "cluster"), KeepDir: true, RealNodes: realNodes,
		Logf: func(format string, args ...any) { fmt.Printf("dev: "+format+"\n", args...) },
	})
	if err != nil {
		return err
	}
	defer c.Stop()
	st, err := stack.Start(ctx, c, stack.Options{
		NATSServers: natsServers, Catalog: defaultCatalog,
		Queue:       func(q *queue.Config) { q.Listen = "127.0.0.1:" + strconv.Itoa(cfg.queuePort) },
		Controllers: &controllers.Config{}, Scheduler: true,
		Workers: &localworkers.Config{StopGrace: 10 * time.Second},
		Logf:    func(format string, args ...any) { fmt.Printf("dev: "+format+"\n", args...) },
	})
	if err != nil {
		return err
	}
	defer st.Stop()
	demoTok, err := createDemo(ctx, c)
	if err != nil {
		return err
	}
	tokenFile := filepath.Join(dir, "demo-token")
	if err := os.WriteFile(tokenFile, []byte(demoTok), 0o600); err != nil {
		return fmt.Errorf("writing the demo token: %w", err)
	}

	kubeconfig := filepath.Join(dir, "kubeconfig")
	data, err := os.ReadFile(c.Kubeconfig())
	if err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfig, data, 0o600); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	fmt.Printf("dev: ready in %s\n", time.Since(began).Round(100*time.Millisecond))
	for _, n := range c.RealNodes() {
		fmt.Printf("real node: %s (host %s; Pods that select %s=true and tolerate its taint run real containers; images %s, %s, %s, %s; logs %s)\n",
			n.Name, n.HostIP, cluster.RealNodeLabel, images.RunplaneRef, images.EchoRef, images.UserRef, images.PauseRef, n.Dir)
	}
	fmt.Printf("kubeconfig: %s\n", kubeconfig)
	if st.QueueURL != "" {
		fmt.Printf("queue ingress URL: %s\n", st.QueueURL)
		fmt.Printf("demo token file: %s\n", tokenFile)
		fmt.Printf("demo token: %s\n", demoTok)
	}
	for _, name := range slices.Sorted(maps.Keys(st.Metrics)) {
		fmt.Printf("metrics: %s %s\n", name, st.Metrics[name])
	}
	fmt.Printf(`
Try:
  export KUBECONFIG=%[1]s PATH=%[2]s:$PATH   # kubectl and helm built for this cluster
  kubectl get nodes
  kubectl -n %[3]s get configmap %[4]s -o yaml      # the GPU spec catalog
  kubectl -n demo get deploy,pods                   # pool "echo" at 0 replicas
  kubectl -n runplane-stock get deploy,pods         # 4 g1.1 stock placeholders (stock is admitted only there)
  TOKEN=$(cat %[7]s)                                # ServiceAccount demo/demo-caller, bound to runplane-invoker
  curl -s -X POST %[5]s/v1/namespaces/demo/pools/echo/invocations -H 'Content-Type: application/json' \
       -H "Authorization: Bearer $TOKEN" \
       -d '{"mode":"sync","payload":{"prompt":"hello"}}'   # scales "echo" from zero, returns the echo
Metrics (the metrics: lines; HTTPS, self-signed): a token of a ServiceAccount bound to ClusterRole runplane-metrics-reader
Component logs: %[6]s (components.log, workers/, *.log)
Press Ctrl-C to stop everything.
`, kubeconfig, filepath.Dir(c.Binary("kubectl")), api.DefaultNamespace, api.CatalogConfigMap, st.QueueURL, filepath.Join(dir, "cluster"), tokenFile)
	select {
	case <-ctx.Done():
		fmt.Println("\ndev: stopping")
		return nil
	case err := <-st.Errs():
		return err
	}
}

// realNodesFor is how many real nodes make dev starts: want, where the
// machine can run them and their binaries are built; otherwise 0, saying
// why (make dev never waits for the node binaries' long first build).
func realNodesFor(ctx context.Context, want int) int {
	if want <= 0 {
		return 0
	}
	if err := cluster.RealNodeSupport(); err != nil {
		fmt.Printf("dev: no real node: %v; going on with kwok nodes only\n", err)
		return 0
	}
	if _, ok := cluster.NodeBinariesBuilt(ctx); !ok {
		fmt.Println("dev: no real node: its binaries are not built (make nodebin, about 15 minutes once); going on with kwok nodes only")
		return 0
	}
	fmt.Printf("dev: starting %d real kubelet node(s) beside the kwok nodes (make dev REAL_NODES=0 turns them off)\n", want)
	return want
}
