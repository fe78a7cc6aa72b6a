package queue

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/runplane/runplane/internal/metricsauth"
	"github.com/runplane/runplane/internal/pki"
)

// metricsServer serves g's /metrics on cfg.MetricsListen, over TLS, to the
// scrapers RBAC allows get on /metrics. Apart from the ingress port: every
// tenant calls that one, and the metrics name every namespace and pool.
// Its Runnables: the server, and the keeper of cfg.MetricsCert's certificate.
func metricsServer(ctx context.Context, cfg Config, kube kubernetes.Interface, g prometheus.Gatherer, log *slog.Logger) ([]manager.Runnable, error) {
	var h http.Handler
	switch {
	case cfg.RESTConfig != nil:
		var err error
		if h, err = metricsauth.Handler(cfg.RESTConfig, logr.FromSlogHandler(log.Handler()), g); err != nil {
			return nil, fmt.Errorf("queue: metrics: %w", err)
		}
	case cfg.InsecureDisableCallerAuth:
		// Nothing authenticates without Kubernetes (-no-kube).
		log.Warn("metrics are served to anyone who reaches the metrics listener (no Kubernetes config to authenticate scrapers; insecure)")
		h = promhttp.HandlerFor(g, promhttp.HandlerOpts{})
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
