// Command dev is `make dev`: a local control plane with a small GPU fleet,
// an embedded NATS JetStream and every runplane component, on one machine.
// It prints the kubeconfig path and the queue ingress URL, each on a line
// that names it, and stays up until Ctrl-C, then stops everything it started.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	var cfg config
	flag.IntVar(&cfg.nodes, "nodes", 4, "number of kwok GPU nodes")
	flag.IntVar(&cfg.gpusPerNode, "gpus-per-node", 8, "nvidia.com/gpu per node")
	flag.StringVar(&cfg.dir, "dir", ".dev", "state, logs and the kubeconfig go here")
	flag.IntVar(&cfg.realNodes, "real-nodes", 1, "real kubelet nodes beside the kwok ones, where the machine can run them (root, runc, make nodebin); 0 turns them off (make dev REAL_NODES=0)")
	flag.IntVar(&cfg.queuePort, "queue-port", 0, "queue ingress port on 127.0.0.1 (0: a free port)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "dev:", err)
		os.Exit(1)
	}
}
