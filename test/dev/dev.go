package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/hack/images"
	"github.com/runplane/runplane/internal/priorityclass"
	"github.com/runplane/runplane/test/cluster"
)

type config struct {
	nodes, gpusPerNode int
	dir                string
	queuePort          int
	realNodes          int
}

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
	if err := bootstrap(ctx, c.Client()); err != nil {
		return err
	}
	stack, err := startComponents(ctx, c, cfg)
	if err != nil {
		return err
	}
	defer stack.stop()
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
	if stack.queueURL != "" {
		fmt.Printf("queue ingress URL: %s\n", stack.queueURL)
		fmt.Printf("demo token file: %s\n", tokenFile)
		fmt.Printf("demo token: %s\n", demoTok)
	}
	for _, name := range slices.Sorted(maps.Keys(stack.metrics)) {
		fmt.Printf("metrics: %s %s\n", name, stack.metrics[name])
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
Component logs: %[6]s (runplane.log, workers/, *.log)
Press Ctrl-C to stop everything.
`, kubeconfig, filepath.Dir(c.Binary("kubectl")), api.DefaultNamespace, api.CatalogConfigMap, stack.queueURL, filepath.Join(dir, "cluster"), tokenFile)
	select {
	case <-ctx.Done():
		fmt.Println("\ndev: stopping")
		return nil
	case err := <-stack.errs:
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

// bootstrap creates what the chart would: runplane's namespace, the
// priority classes and the GPU spec catalog.
func bootstrap(ctx context.Context, client kubernetes.Interface) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: api.DefaultNamespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace: %w", err)
	}
	for _, pc := range priorityclass.Defaults() { // the chart's, as its default values render them
		if _, err := client.SchedulingV1().PriorityClasses().Create(ctx, &pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating priority class %s: %w", pc.Name, err)
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: api.CatalogConfigMap, Namespace: api.DefaultNamespace}, Data: defaultCatalog}
	if _, err := client.CoreV1().ConfigMaps(api.DefaultNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the GPU spec catalog: %w", err)
	}
	return nil
}
