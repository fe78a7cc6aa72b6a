// Package stack runs runplane's components in-process next to a local
// control plane (test/cluster), wired as the chart wires them: NATS in
// runplane's operator mode with the queue's auth callout and verified TLS
// (test/natsauth), runplane's namespace, PriorityClasses and GPU spec
// catalog, the webhook registered by URL, the queue (ingress + activator),
// and on request the controllers (pool egress restricted as the chart
// restricts it), the extender with the runplane-scheduler, and local
// workers for kwok Pods (test/localworkers). make dev (test/dev), the
// serverless e2e suite and the real-node suite each start one with their
// own Options; suites start theirs through Main (test/README.md).
package stack

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/runplane/runplane/controllers"
	"github.com/runplane/runplane/controllers/egress"
	"github.com/runplane/runplane/internal/logging"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/localworkers"
	"github.com/runplane/runplane/test/natsauth"
	"github.com/runplane/runplane/webhook"
)

// LogFile is the components' log in the cluster's dir.
const LogFile = "components.log"

// Options choose what runs besides the webhook, NATS and the queue (which
// always run) and adjust the components' settings; the stack fills in the
// wiring (addresses, credentials, REST config, loggers) afterwards.
type Options struct {
	// Namespaces are created besides runplane's (the tests' own).
	Namespaces []string
	// NATSHost is the address NATS listens on (default 127.0.0.1); a real
	// node's Pods reach only its host address (cluster.RealNode.HostIP).
	NATSHost string
	// NATSServers is how many NATS servers run as one cluster on loopback
	// (default 1; the chart's bundled NATS runs 3); the queue's stream
	// replicas follow.
	NATSServers int
	// Catalog is the GPU spec catalog ConfigMap's data (none when empty).
	Catalog map[string]string
	// Webhook and Queue adjust their components' configurations.
	Webhook func(*webhook.Config)
	Queue   func(*queue.Config)
	// Controllers runs runplane's controllers with this configuration when
	// set; pool egress is then restricted by the chart's
	// AdminNetworkPolicy (or, where the cluster serves none, a
	// NetworkPolicy per namespace) and the controllers get its settings.
	Controllers *controllers.Config
	// Scheduler runs the extender and the runplane-scheduler calling it.
	Scheduler bool
	// Workers runs a local worker (sidecar + framework-echo processes) for
	// every kwok Pod of a pool with this configuration when set.
	Workers *localworkers.Config
	// Logf receives progress lines (default: none).
	Logf func(format string, args ...any)
}

// Stack is a running stack.
type Stack struct {
	Cluster *cluster.Cluster
	// NATS are the servers, NATSURL their client URLs, Auth their trust.
	NATS    []*server.Server
	NATSURL string
	Auth    natsauth.Auth
	// QueueURL is the ingress's URL (http://host:port).
	QueueURL string
	// Metrics are the components' /metrics URLs by component (HTTPS, to
	// scrapers RBAC allows get on /metrics, as in the chart).
	Metrics map[string]string
	// Egress restricts pool Pods (when Options.Controllers is set).
	Egress egress.Settings
	// Workers are the local workers (when Options.Workers is set).
	Workers *localworkers.Runner
	// LogPath is the components' log file.
	LogPath string
	// Log is the components' logger.
	Log *slog.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup
	stops  []func()
	errs   chan error
}

// Start starts the stack on c. Its components run until Stop (not until
// ctx ends: ctx bounds the start); a component that fails early is
// reported on Errs.
func Start(ctx context.Context, c *cluster.Cluster, o Options) (_ *Stack, err error) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Stack{Cluster: c, cancel: cancel, errs: make(chan error, 8), Metrics: map[string]string{}, LogPath: filepath.Join(c.Dir(), LogFile)}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	began := time.Now()
	if err := s.openLog(); err != nil {
		return nil, err
	}
	if err := bootstrap(ctx, c, o); err != nil {
		return nil, err
	}
	if err := s.startNATS(o); err != nil {
		return nil, err
	}
	if err := s.startWebhook(ctx, runCtx, o); err != nil {
		return nil, err
	}
	if o.Controllers != nil {
		if err := s.startControllers(ctx, runCtx, o); err != nil {
			return nil, err
		}
	}
	if o.Scheduler {
		if err := s.startScheduler(ctx, runCtx, o); err != nil {
			return nil, err
		}
	}
	if err := s.startQueue(ctx, runCtx, o); err != nil {
		return nil, err
	}
	if o.Workers != nil {
		if err := s.startWorkers(ctx, runCtx, *o.Workers); err != nil {
			return nil, err
		}
	}
	if err := s.waitReady(ctx); err != nil {
		return nil, err
	}
	logf("stack: serving in %s (logs %s)", time.Since(began).Round(100*time.Millisecond), s.LogPath)
	return s, nil
}

// Errs reports a component that stopped on its own.
func (s *Stack) Errs() <-chan error { return s.errs }

// Stop stops every component and waits for them: the in-process ones
// first, then what they used (workers, scheduler, NATS, the log file), in
// the reverse order of starting.
func (s *Stack) Stop() {
	s.cancel()
	s.wg.Wait()
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
}

// NATSPort is the first server's client port.
func (s *Stack) NATSPort() int { return s.NATS[0].Addr().(*net.TCPAddr).Port }

// goRun runs a component until the stack stops; an early error is
// reported on s.errs (and logged), so a caller fails loudly instead of
// running half a system.
func (s *Stack) goRun(ctx context.Context, name string, fn func(context.Context) error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			s.Log.Error(name+" stopped", "err", err)
			select {
			case s.errs <- fmt.Errorf("%s stopped: %w", name, err):
			default:
			}
		}
	}()
}

// openLog sends the components' logs (klog's and controller-runtime's
// too) to LogFile, as text for people.
func (s *Stack) openLog() error {
	f, err := os.Create(s.LogPath)
	if err != nil {
		return fmt.Errorf("components log: %w", err)
	}
	s.stops = append(s.stops, func() { _ = f.Close() })
	if s.Log, err = logging.New(f, logging.Options{Format: logging.FormatText}); err != nil {
		return err
	}
	logging.Install(s.Log)
	return nil
}

// startNATS runs the chart's NATS: operator mode with the queue's callout,
// verified TLS, every write fsynced before its acknowledgement; with
// several servers, streams and buckets at that many replicas.
func (s *Stack) startNATS(o Options) error {
	var err error
	if s.Auth, err = natsauth.Write(filepath.Join(s.Cluster.Dir(), "nats-auth")); err != nil {
		return err
	}
	dir, exports := filepath.Join(s.Cluster.Dir(), "nats"), queue.WorkerExports(stream.Config{})
	if o.NATSServers > 1 {
		s.NATS, err = natsauth.StartCluster(dir, s.Auth, exports, o.NATSServers)
	} else {
		var ns *server.Server
		ns, err = natsauth.Start(dir, cmp.Or(o.NATSHost, "127.0.0.1"), s.Auth, exports)
		s.NATS = []*server.Server{ns}
	}
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	for _, ns := range s.NATS {
		s.stops = append(s.stops, ns.Shutdown)
	}
	s.NATSURL = natsauth.ClientURLs(s.NATS)
	return nil
}
