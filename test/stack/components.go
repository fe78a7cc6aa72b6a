package stack

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/controllers"
	"github.com/runplane/runplane/extender"
	"github.com/runplane/runplane/extender/profile"
	"github.com/runplane/runplane/internal/logging"
	"github.com/runplane/runplane/internal/metricsauth"
	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/test/kit"
	"github.com/runplane/runplane/test/localworkers"
	"github.com/runplane/runplane/webhook"
	"github.com/runplane/runplane/webhook/config"
	"github.com/runplane/runplane/webhook/mutate"
)

// Image is the runplane image Pods are given unless Options.Webhook sets
// another; kwok never pulls it (a real node needs images.RunplaneRef).
const Image = "ghcr.io/runplane/runplane:dev"

// startWebhook runs the webhook registered by URL on loopback with its own
// CA. Sidecars verify NATS as the chart's do: the name its certificate
// carries, the CA bundle published where the chart's queue publishes it.
func (s *Stack) startWebhook(ctx, runCtx context.Context, o Options) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("webhook listener: %w", err)
	}
	ca, err := os.ReadFile(s.Auth.Client.CAFile)
	if err != nil {
		return fmt.Errorf("NATS CA bundle: %w", err)
	}
	if err := natstls.PublishCA(ctx, s.Cluster.Client(), api.DefaultNamespace, ca, nil); err != nil {
		return fmt.Errorf("publishing the NATS CA bundle: %w", err)
	}
	inj := mutate.DefaultConfig()
	inj.Image = Image
	// The chart's setting (stock.namespace): placeholders only there.
	inj.StockNamespaces = []string{api.DefaultStockNamespace}
	inj.NATSURL, inj.NATSServerName = s.NATS[0].ClientURL(), s.Auth.Client.ServerName
	cfg := webhook.Config{RESTConfig: s.Cluster.RESTConfig(), Listener: ln, Logger: s.Log.With("component", "webhook")}
	cfg.HealthAddr, cfg.Injection, cfg.TLS.IPAddresses = "0", inj, []string{"127.0.0.1"}
	cfg.Webhooks = config.Webhooks{Manage: true, URL: "https://" + ln.Addr().String(), Resync: metav1.Duration{Duration: 5 * time.Second}}
	if o.Webhook != nil {
		o.Webhook(&cfg)
	}
	s.Metrics["webhook"] = "https://" + ln.Addr().String() + "/metrics"
	s.goRun(runCtx, "webhook", func(ctx context.Context) error { return webhook.Run(ctx, cfg) })
	return nil
}

// startControllers restricts pool egress as the chart does and runs the
// controllers with those settings.
func (s *Stack) startControllers(ctx, runCtx context.Context, o Options) error {
	var err error
	if s.Egress, err = s.restrictEgress(ctx); err != nil {
		return err
	}
	// controller-runtime's metrics server takes an address, not a listener.
	port, err := kit.FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	cfg := *o.Controllers
	cfg.RESTConfig, cfg.Egress = s.Cluster.RESTConfig(), s.Egress
	cfg.Image = cmp.Or(cfg.Image, Image)
	cfg.Metrics, cfg.HealthAddr = metricsauth.DevSettings(api.DefaultNamespace, "controller", "127.0.0.1:"+strconv.Itoa(port)), "0"
	if cfg.LeaderElection.LeaderElect == nil {
		cfg.LeaderElection.LeaderElect = ptr.To(false) // one in-process instance
	}
	cfg.Logger = logr.FromSlogHandler(s.Log.With("component", "controllers").Handler())
	s.Metrics["controller"] = "https://" + cfg.Metrics.BindAddress + "/metrics"
	s.goRun(runCtx, "controllers", func(ctx context.Context) error { return controllers.Run(ctx, cfg) })
	return nil
}

// startScheduler runs the extender and the runplane-scheduler (a
// kube-scheduler with the runplane profile) calling it. As the chart's
// scheduler config, the profile is the one for DRA specs
// (profile.Options.DRA) when the catalog has one: their Pods request no
// managed resource, and the scheduler would bind them without the
// extender — a DRA placeholder's claim handed over, the GPU Pod bound
// beside the placeholder, two Pods on one device.
func (s *Stack) startScheduler(ctx, runCtx context.Context, o Options) error {
	specs, err := catalog.Parse(o.Catalog)
	if err != nil {
		return fmt.Errorf("scheduler profile: %w", err)
	}
	dra := false
	for _, spec := range specs {
		dra = dra || spec.IsDRA()
	}
	ec := extender.Config{RESTConfig: s.Cluster.RESTConfig(), Logger: s.Log.With("component", "extender")}
	ec.Addr, ec.Metrics = "127.0.0.1:0", metricsauth.DevSettings(api.DefaultNamespace, "extender", "127.0.0.1:0")
	ec.LeaderElection.LeaderElect = ptr.To(false) // one in-process instance
	ext, err := extender.Start(runCtx, ec)
	if err != nil {
		return fmt.Errorf("extender: %w", err)
	}
	s.goRun(runCtx, "extender", func(context.Context) error { return ext.Wait() })
	s.Metrics["extender"] = "https://" + ext.MetricsAddr() + "/metrics"
	cfg, err := profile.SchedulerConfig(profile.Options{URLPrefix: "https://" + ext.Addr(), CAData: ext.CACert(), DRA: dra})
	if err != nil {
		return fmt.Errorf("scheduler profile: %w", err)
	}
	sched, err := s.Cluster.StartScheduler(ctx, cfg)
	if err != nil {
		return fmt.Errorf("runplane-scheduler: %w", err)
	}
	s.stops = append(s.stops, sched.Stop)
	return nil
}

// startQueue runs the queue (ingress + activator) as the queue's NATS user
// with its callout, and returns once it listens.
func (s *Stack) startQueue(ctx, runCtx context.Context, o Options) error {
	addr, metricsAddr := make(chan string, 1), make(chan string, 1)
	cfg := queue.Config{Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", MetricsCert: metricsauth.DevCert(api.DefaultNamespace, "queue")}
	if o.Queue != nil {
		o.Queue(&cfg)
	}
	cfg.OnListen, cfg.OnMetricsListen = func(a string) { addr <- a }, func(a string) { metricsAddr <- a }
	cfg.RESTConfig, cfg.Logger = s.Cluster.RESTConfig(), s.Log.With("component", "queue")
	cfg.NATS.URL, cfg.NATS.TrustFile, cfg.NATS.Client = s.NATSURL, s.Auth.TrustFile, s.Auth.Client
	if n := len(s.NATS); n > 1 {
		cfg.Stream.Replicas, cfg.NATS.Servers = n, n
	}
	s.goRun(runCtx, "queue", func(ctx context.Context) error { return queue.Run(ctx, cfg) })
	timeout := time.After(2 * time.Minute)
	for s.QueueURL == "" || s.Metrics["queue"] == "" {
		select {
		case a := <-addr:
			s.QueueURL = "http://" + a
		case a := <-metricsAddr:
			s.Metrics["queue"] = "https://" + a + "/metrics"
		case err := <-s.errs:
			return err
		case <-ctx.Done():
			return fmt.Errorf("queue: %w", ctx.Err())
		case <-timeout:
			return fmt.Errorf("queue: did not listen within 2 minutes (see %s)", s.LogPath)
		}
	}
	return nil
}

// startWorkers builds runplane-sidecar and framework-echo and runs them for
// every kwok Pod of a pool.
func (s *Stack) startWorkers(ctx, runCtx context.Context, cfg localworkers.Config) error {
	bin := filepath.Join(s.Cluster.Dir(), "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	var err error
	if cfg.SidecarBinary, cfg.FrameworkBinary, err = localworkers.BuildBinaries(ctx, bin); err != nil {
		return err
	}
	cfg.Client, cfg.NATSURL, cfg.Dir = s.Cluster.Client(), s.NATSURL, filepath.Join(s.Cluster.Dir(), "workers")
	cfg.SidecarArgs = append([]string{"-log-format=" + logging.FormatText}, cfg.SidecarArgs...)
	cfg.FrameworkArgs = append([]string{"-log-format=" + logging.FormatText}, cfg.FrameworkArgs...)
	cfg.Logf = func(format string, args ...any) {
		s.Log.Info(fmt.Sprintf(format, args...), "component", "localworkers")
	}
	if s.Workers, err = localworkers.Start(runCtx, cfg); err != nil {
		return fmt.Errorf("local workers: %w", err)
	}
	s.stops = append(s.stops, s.Workers.Wait)
	return nil
}

// waitReady returns once a pool Pod is mutated (the webhook serves and the
// API server trusts it) and the ingress answers /readyz, or a component
// failed.
func (s *Stack) waitReady(ctx context.Context) error {
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: metav1.NamespaceDefault, Labels: map[string]string{api.LabelPool: "probe"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "x"}}}}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-s.errs:
			return false, err
		default:
		}
		got, err := s.Cluster.Client().CoreV1().Pods(probe.Namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil || !hasSidecar(got) {
			return false, nil
		}
		return kit.HTTPOK(ctx, s.QueueURL+"/readyz"), nil
	})
	if err != nil {
		return fmt.Errorf("webhook or queue not ready (see %s): %w", s.LogPath, err)
	}
	return nil
}

func hasSidecar(p *corev1.Pod) bool {
	for _, c := range p.Spec.InitContainers {
		if c.Name == api.SidecarContainerName {
			return true
		}
	}
	return false
}
