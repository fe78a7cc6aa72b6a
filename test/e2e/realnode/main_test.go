// Package realnode is the e2e suite on a real kubelet node (test/cluster
// RealNodes): what only a container runtime can show. It needs root, runc
// and the CNI plugins (hack/install-deps.sh); elsewhere every test skips and
// says why.
//
// The stack: one real node (no kwok nodes), an in-process nats-server
// listening on the node's host address (Pods reach it through the node's veth), the
// webhook injecting the runplane image (imported into the node), the
// queue, the extender with the runplane-scheduler (stack_scheduler_test.go) and
// the controllers (stack_controller_test.go); pool Pods' egress restricted
// by the product's AdminNetworkPolicy, which the node enforces
// (restrictEgress).
package realnode

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/hack/images"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/webhook"
	"github.com/runplane/runplane/webhook/mutate"
)

const ns = "e2e"

var (
	env      *cluster.Cluster
	node     *cluster.RealNode
	queueURL string
	// skip is why this machine cannot run real nodes ("" when it can).
	skip string
)

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
	os.Exit(run(m))
}

func run(m *testing.M) int {
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	began := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{RealNodes: 1, RealNodeDRA: true, Logf: logf, Dir: os.Getenv("RUNPLANE_E2E_DIR")})
	if err != nil {
		logf("cluster: %v", err)
		return 1
	}
	defer c.Stop()
	env, node = c, c.RealNodes()[0]
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	if err := startStack(runCtx, &wg); err != nil {
		logf("realnode stack: %v", err)
		c.DumpLogs(logf, 40)
		return 1
	}
	logf("realnode: stack up in %s", time.Since(began).Round(100*time.Millisecond))
	code := m.Run()
	if code != 0 {
		c.DumpLogs(logf, 60)
		for _, f := range []string{"containerd.log", "fakedra.log"} {
			if b, err := os.ReadFile(filepath.Join(node.Dir, f)); err == nil {
				logf("--- %s:\n%s", f, tail(string(b), 40))
			}
		}
	}
	return code
}

func tail(s string, n int) string {
	lines := 0
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			if lines++; lines > n {
				return s[i+1:]
			}
		}
	}
	return s
}

func startStack(ctx context.Context, wg *sync.WaitGroup) error {
	// NATS on the node's host address: the only address Pods reach.
	ns0, err := startNATS(ctx)
	if err != nil {
		return err
	}
	for _, n := range []string{api.DefaultNamespace, ns} {
		if err := env.CreateNamespace(ctx, n); err != nil {
			return err
		}
	}
	if err := restrictEgress(ctx, ns0); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(env.Dir(), "components.log"))
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	errc := make(chan error, 8)
	goRun := func(name string, fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	inj := mutate.DefaultConfig()
	inj.Image, inj.PauseImage, inj.ImagePullPolicy = images.RunplaneRef, images.PauseRef, corev1.PullNever
	inj.NATSURL = ns0.ClientURL()
	// The sidecars verify the server as the chart's do: the CA the queue
	// would publish, the name the certificate carries.
	inj.NATSServerName = natsAuth.Client.ServerName
	if err := publishNATSCA(ctx); err != nil {
		return err
	}
	goRun("webhook", func() error {
		return webhook.Run(ctx, webhook.Config{
			RESTConfig: env.RESTConfig(), Listener: ln, HealthAddr: "0", Injection: inj, Logger: log,
			TLS: webhook.TLSConfig{IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}},
			// The runplane-gpu policy counts only a resource no test asks
			// for: the device-plugin tests (gpu_test.go, ssh_test.go)
			// request nvidia.com/gpu directly, while takeover_test.go goes
			// through runplane.io/gpu-spec and stock (the webhook's
			// mutation, the runplane-scheduler and the extender), which
			// the policy does not change.
			Webhooks: webhook.WebhooksConfig{Manage: true, URL: "https://" + ln.Addr().String(), Resync: 5 * time.Second,
				GPUPolicy: &webhook.GPUPolicy{Resources: []string{"runplane.io/no-gpu-policy-in-this-stack"}}},
		})
	})
	addr := make(chan string, 1)
	goRun("queue", func() error {
		return queue.Run(ctx, withNATS(queue.Config{
			InsecureDisableCallerAuth: true, Listen: "127.0.0.1:0", OnListen: func(a string) { addr <- a },
			RESTConfig: env.RESTConfig(), Namespace: ns, HeartbeatTimeout: 10 * time.Second, Backoff: 200 * time.Millisecond,
			Tick: 200 * time.Millisecond, Logger: log,
		}, ns0))
	})
	select {
	case a := <-addr:
		queueURL = "http://" + a
	case err := <-errc:
		return err
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("queue did not listen")
	}
	if err := startScheduler(ctx, log, goRun); err != nil {
		return err
	}
	return startControllers(ctx, log, goRun)
}

// need skips t where real nodes cannot run.
func need(t testing.TB) {
	t.Helper()
	if skip != "" {
		t.Skip("no real node on this machine: " + skip)
	}
}
