package queue

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/runplane/runplane/internal/buildinfo"

	"github.com/runplane/runplane/internal/metricsauth"
	"github.com/runplane/runplane/internal/pki"
)

// Registry is where the queue's metrics go and what /metrics serves
// (Config.Registry).
type Registry interface {
	prometheus.Registerer
	prometheus.Gatherer
}

// registry is the one registry of a Run: cfg.Registry, else
// controller-runtime's, which the manager's series (leader election,
// client-go) are in, with the process's collectors
// (metricsauth.RegisterProcess; in another: the build information, once).
// What Run registers in it, it takes out when it returns (done): the
// registry outlives a queue (tests run one after another), and the
// scrape-time collectors read this queue's store and connections.
func registry(cfg Config) (reg *tracked, done func(), err error) {
	r := cfg.Registry
	if r == nil {
		r = ctrlmetrics.Registry
	}
	if r == ctrlmetrics.Registry {
		err = metricsauth.RegisterProcess()
	} else if err = r.Register(buildinfo.Collector()); errors.As(err, new(prometheus.AlreadyRegisteredError)) {
		err = nil // an earlier queue's: the build is the same
	}
	if err != nil {
		return nil, nil, fmt.Errorf("queue: metrics: %w", err)
	}
	t := &tracked{Registry: r}
	return t, t.unregisterAll, nil
}

// tracked is a Registry that remembers what was registered through it
// (prometheus has no such wrapper; the queue's packages register into a
// prometheus.Registerer).
type tracked struct {
	Registry
	mu  sync.Mutex
	own []prometheus.Collector
}

func (t *tracked) Register(c prometheus.Collector) error {
	if err := t.Registry.Register(c); err != nil {
		return err
	}
	t.mu.Lock()
	t.own = append(t.own, c)
	t.mu.Unlock()
	return nil
}

// MustRegister panics as prometheus.Registry's does.
func (t *tracked) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

func (t *tracked) unregisterAll() {
	t.mu.Lock()
	own := t.own
	t.own = nil
	t.mu.Unlock()
	for _, c := range own {
		t.Registry.Unregister(c)
	}
}

// metricsServer serves reg's /metrics on cfg.MetricsListen, over TLS, to the
// scrapers RBAC allows get on /metrics. Apart from the ingress port: every
// tenant calls that one, and the metrics name every namespace and pool.
// Its Runnables: the server, and the keeper of cfg.MetricsCert's certificate.
func metricsServer(ctx context.Context, cfg Config, kube kubernetes.Interface, reg Registry, log *slog.Logger) ([]manager.Runnable, error) {
	var h http.Handler
	switch {
	case cfg.RESTConfig != nil:
		var err error
		if h, err = metricsauth.Handler(cfg.RESTConfig, logr.FromSlogHandler(log.Handler()), reg); err != nil {
			return nil, fmt.Errorf("queue: metrics: %w", err)
		}
	case cfg.InsecureDisableCallerAuth:
		// Nothing authenticates without Kubernetes (-no-kube).
		log.Warn("metrics are served to anyone who reaches the metrics listener (no Kubernetes config to authenticate scrapers; insecure)")
		h = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	default:
		return nil, errors.New("queue: metrics: scrapers are authenticated by the API server, which needs a Kubernetes config (InsecureDisableCallerAuth serves them to anyone: insecure)")
	}
	var keeper *pki.Keeper
	if cfg.MetricsCert.Secret.Name != "" {
		if kube == nil {
			return nil, errors.New("queue: metrics: a certificate Secret needs Kubernetes")
		}
		var err error
		if keeper, err = cfg.MetricsCert.Keeper(kube, log); err != nil {
			return nil, fmt.Errorf("queue: %w", err)
		}
		// Loaded before the listener serves it.
		if err := keeper.Init(ctx); err != nil {
			return nil, fmt.Errorf("queue: metrics: %w", err)
		}
		if err := metricsauth.RegisterExpiry(reg, keeper); err != nil {
			return nil, fmt.Errorf("queue: %w", err)
		}
	}
	tlsCfg, err := metricsauth.TLS(keeper, "runplane-queue")
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.MetricsListen)
	if err != nil {
		return nil, fmt.Errorf("queue: metrics: listen on %s: %w", cfg.MetricsListen, err)
	}
	if cfg.OnMetricsListen != nil {
		cfg.OnMetricsListen(ln.Addr().String())
	}
	log.Info("metrics listening", "addr", ln.Addr().String())
	mux := http.NewServeMux()
	mux.Handle("GET "+metricsauth.Path, h)
	out := []manager.Runnable{&manager.Server{Name: "metrics", Listener: tls.NewListener(ln, tlsCfg), ShutdownTimeout: ptr.To(5 * time.Second),
		Server: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}}}
	if keeper != nil {
		out = append(out, keeper)
	}
	return out, nil
}
