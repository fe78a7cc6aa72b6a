package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	npav1alpha1 "sigs.k8s.io/network-policy-api/apis/v1alpha1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/controllers"
	"github.com/runplane/runplane/controllers/egress"
	"github.com/runplane/runplane/extender"
	"github.com/runplane/runplane/extender/profile"
	"github.com/runplane/runplane/internal/logging"
	"github.com/runplane/runplane/internal/metricsauth"
	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/localworkers"
	"github.com/runplane/runplane/test/natsauth"
	"github.com/runplane/runplane/webhook"
	"github.com/runplane/runplane/webhook/mutate"
)

// devImage is the image name Pods are given; kwok never pulls it.
const devImage = "ghcr.io/runplane/runplane:dev"

// stack is the runplane components make dev runs next to the cluster.
type stack struct {
	queueURL string
	// metrics are the components' /metrics URLs, by component, each served
	// as in the chart (HTTPS, to scrapers RBAC allows get on /metrics).
	metrics map[string]string
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stops   []func()
	errs    chan error
}

// stop stops every component and waits for them: the in-process ones
// first, then what they used (workers, scheduler, NATS, the log file), in
// the reverse order of starting.
func (s *stack) stop() {
	s.cancel()
	s.wg.Wait()
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
}

// goRun runs a component until the stack stops; an early error is reported
// on s.errs so make dev fails loudly instead of running half a system.
func (s *stack) goRun(ctx context.Context, name string, fn func(context.Context) error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			select {
			case s.errs <- fmt.Errorf("%s stopped: %w", name, err):
			default:
			}
		}
	}()
}

// natsServers is the chart's nats.bundled.replicas (and queue stream
// replicas) by default.
const natsServers = 3

// startComponents starts an embedded NATS JetStream and every runplane
// component: webhook, controllers, extender with the runplane-scheduler,
// queue (ingress + activator) and local workers for pool Pods. Logs go to
// files in the cluster dir.
func startComponents(parent context.Context, c *cluster.Cluster, cfg config) (_ *stack, err error) {
	ctx, cancel := context.WithCancel(parent)
	s := &stack{cancel: cancel, errs: make(chan error, 8), metrics: map[string]string{}}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	logFile, err := os.Create(filepath.Join(c.Dir(), "runplane.log"))
	if err != nil {
		return nil, err
	}
	s.stops = append(s.stops, func() { logFile.Close() })
	// Text for people (the chart's binaries log JSON); klog (client-go) and
	// controller-runtime's informers log through the same handler.
	log, err := logging.New(logFile, logging.Options{Format: logging.FormatText})
	if err != nil {
		return nil, err
	}
	logging.Install(log)

	// NATS in runplane's operator mode: the queue connects as its user in
	// RUNPLANE; every sidecar presents its Pod-bound token, which the
	// queue's callout turns into a user of an account of its worker's own.
	auth, err := natsauth.Write(filepath.Join(c.Dir(), "nats-auth"))
	if err != nil {
		return nil, err
	}
	// The chart's default NATS: three servers, streams and buckets at three
	// replicas, every write fsynced before its acknowledgement.
	servers, err := natsauth.StartCluster(filepath.Join(c.Dir(), "nats"), auth, queue.WorkerExports(stream.Config{}), natsServers)
	if err != nil {
		return nil, err
	}
	for _, ns := range servers {
		s.stops = append(s.stops, ns.Shutdown)
	}
	natsURL := natsauth.ClientURLs(servers)
	natsPort := servers[0].Addr().(*net.TCPAddr).Port

	// Webhook, registered by URL on loopback with its own CA.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	inj := mutate.DefaultConfig()
	inj.Image = devImage
	// The chart's setting (stock.namespace): placeholders only there.
	inj.StockNamespaces = []string{api.DefaultStockNamespace}
	// What Pods see: an in-cluster address, never the token.
	inj.NATSURL = "nats://nats." + api.DefaultNamespace + ".svc:" + strconv.Itoa(natsPort)
	// Sidecars verify the server as in the chart: the name its certificate
	// carries, the CA bundle published where the chart's queue publishes it.
	inj.NATSServerName = auth.Client.ServerName
	ca, err := os.ReadFile(auth.Client.CAFile)
	if err != nil {
		return nil, err
	}
	if err := natstls.PublishCA(ctx, c.Client(), api.DefaultNamespace, ca, nil); err != nil {
		return nil, err
	}
	s.metrics["webhook"] = "https://" + ln.Addr().String() + "/metrics"
	s.goRun(ctx, "webhook", func(ctx context.Context) error {
		return webhook.Run(ctx, webhook.Config{
			RESTConfig: c.RESTConfig(), Listener: ln, HealthAddr: "0", Injection: inj, Logger: log.With("component", "webhook"),
			TLS:      webhook.TLSConfig{IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}},
			Webhooks: webhook.WebhooksConfig{Manage: true, URL: "https://" + ln.Addr().String()},
		})
	})

	// Controllers, the SSH Service controller among them; pool egress as the
	// chart restricts it.
	egressSettings, err := restrictEgress(ctx, c, natsPort)
	if err != nil {
		return nil, err
	}
	// controller-runtime's metrics server takes an address, not a listener.
	ctrlMetricsPort, err := cluster.FreePort()
	if err != nil {
		return nil, err
	}
	ctrlMetrics := "127.0.0.1:" + strconv.Itoa(ctrlMetricsPort)
	s.metrics["controller"] = "https://" + ctrlMetrics + "/metrics"
	s.goRun(ctx, "controllers", func(ctx context.Context) error {
		return controllers.Run(ctx, controllers.Config{
			RESTConfig: c.RESTConfig(), Image: devImage,
			Egress:      egressSettings,
			MetricsAddr: ctrlMetrics, ProbeAddr: "0", MetricsCert: metricsauth.DevCert(api.DefaultNamespace, "controller"),
			Logger: logr.FromSlogHandler(log.With("component", "controllers").Handler()),
		})
	})

	// Extender, then the runplane-scheduler kube-scheduler that calls it.
	ext, err := extender.Start(ctx, extender.Config{RESTConfig: c.RESTConfig(), Addr: "127.0.0.1:0", Logger: log.With("component", "extender"),
		MetricsAddr: "127.0.0.1:0", MetricsCert: metricsauth.DevCert(api.DefaultNamespace, "extender")})
	if err != nil {
		return nil, fmt.Errorf("extender: %w", err)
	}
	s.goRun(ctx, "extender", func(context.Context) error { return ext.Wait() })
	s.metrics["extender"] = "https://" + ext.MetricsAddr() + "/metrics"
	schedCfg, err := profile.SchedulerConfig(profile.Options{URLPrefix: "https://" + ext.Addr(), CAData: ext.CACert()})
	if err != nil {
		return nil, fmt.Errorf("scheduler profile: %w", err)
	}
	sched, err := c.StartScheduler(ctx, schedCfg)
	if err != nil {
		return nil, fmt.Errorf("runplane-scheduler: %w", err)
	}
	s.stops = append(s.stops, sched.Stop)

	// Queue: ingress + activator.
	addr, metricsAddr := make(chan string, 1), make(chan string, 1)
	queueListen := "127.0.0.1:" + strconv.Itoa(cfg.queuePort)
	s.goRun(ctx, "queue", func(ctx context.Context) error {
		qc := queue.Config{
			Listen: queueListen, OnListen: func(a string) { addr <- a },
			MetricsListen: "127.0.0.1:0", OnMetricsListen: func(a string) { metricsAddr <- a },
			MetricsCert: metricsauth.DevCert(api.DefaultNamespace, "queue"),
			RESTConfig:  c.RESTConfig(), Logger: log.With("component", "queue"),
		}
		qc.NATSURL, qc.NATSTrustFile, qc.NATSTLS = natsURL, auth.TrustFile, auth.Client
		qc.Stream.Replicas, qc.NATSServers = natsServers, natsServers
		return queue.Run(ctx, qc)
	})
	for s.queueURL == "" || s.metrics["queue"] == "" {
		select {
		case a := <-addr:
			s.queueURL = "http://" + a
		case a := <-metricsAddr:
			s.metrics["queue"] = "https://" + a + "/metrics"
		case err := <-s.errs:
			return nil, err
		case <-time.After(2 * time.Minute):
			return nil, fmt.Errorf("queue: did not listen within 2 minutes")
		}
	}

	// Local workers: every running pool Pod becomes a sidecar + framework-echo.
	bin := filepath.Join(c.Dir(), "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	sidecarBin, echoBin, err := localworkers.BuildBinaries(ctx, bin)
	if err != nil {
		return nil, err
	}
	workers, err := localworkers.Start(ctx, localworkers.Config{
		Client: c.Client(), NATSURL: natsURL,
		SidecarBinary: sidecarBin, FrameworkBinary: echoBin, Dir: filepath.Join(c.Dir(), "workers"),
		StopGrace:   10 * time.Second,
		SidecarArgs: []string{"-log-format=" + logging.FormatText}, FrameworkArgs: []string{"-log-format=" + logging.FormatText},
		Logf: func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...), "component", "localworkers") },
	})
	if err != nil {
		return nil, fmt.Errorf("local workers: %w", err)
	}
	s.stops = append(s.stops, workers.Wait)

	// A component that failed while the others started fails make dev.
	select {
	case err := <-s.errs:
		return nil, err
	default:
	}
	return s, nil
}

// restrictEgress applies the chart's egress restriction: its default
// settings (egress.DefaultSettings, which the chart's values mirror; the
// cluster's CoreDNS listens on their port 53) with this cluster's NATS
// port. On a cluster that serves no AdminNetworkPolicy it says so and falls
// back to networkPolicy mode, as the chart's egress.enforcement would have
// to be set there.
func restrictEgress(ctx context.Context, c *cluster.Cluster, natsPort int) (egress.Settings, error) {
	s := egress.DefaultSettings()
	s.NATS.Port = int32(natsPort)
	scheme := runtime.NewScheme()
	if err := npav1alpha1.Install(scheme); err != nil {
		return s, err
	}
	cl, err := client.New(c.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		return s, fmt.Errorf("egress: %w", err)
	}
	err = egress.ApplyAdminPolicy(ctx, cl, s)
	if errors.Is(err, egress.ErrAdminPolicyNotServed) {
		fmt.Printf("dev: %v; pool egress falls back to a NetworkPolicy per namespace (egress.enforcement=networkPolicy)\n", err)
		s.Enforcement = egress.EnforcementNetworkPolicy
		return s, nil
	}
	return s, err
}
