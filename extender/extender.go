package extender

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/extender/ledger"
)

// Extender is a running extender.
type Extender struct {
	cfg       Config
	log       *slog.Logger
	client    kubernetes.Interface
	catalog   *catalog.Store
	ledger    *ledger.Ledger
	metrics   *metrics
	podLister listersv1.PodLister
	synced    []cache.InformerSynced
	intents   intents
	scratch   sync.Pool // *scratch: request buffers
	leader    atomic.Bool
	listener  net.Listener
	caPEM     []byte
	done      chan struct{}
	err       error
}

// Run starts an extender and serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	e, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	return e.Wait()
}

// Start builds the ledger from the API (informers synced), starts leader
// election and begins serving HTTPS. It returns once the extender serves;
// everything stops when ctx ends.
func Start(ctx context.Context, cfg Config) (*Extender, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	rc := rest.CopyConfig(cfg.RESTConfig)
	if rc.QPS == 0 {
		// Binds come in bursts (one Pod per scheduling cycle, a Binding and
		// maybe a patch and a delete each): client-go's default 5 QPS would
		// make the extender the bottleneck.
		rc.QPS, rc.Burst = 200, 400
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("extender: building client: %w", err)
	}
	tlsCfg, caPEM, err := cfg.tlsConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("extender: %w", err)
	}
	e := &Extender{
		cfg: cfg, log: cfg.Logger, client: client, caPEM: caPEM, done: make(chan struct{}),
		ledger: ledger.New(ledger.Options{ReservationTTL: cfg.ReservationTTL}),
	}
	e.metrics = newMetrics(e.ledger)
	if e.catalog, err = catalog.Watch(ctx, client, cfg.Namespace); err != nil {
		return nil, fmt.Errorf("extender: %w", err)
	}
	if err := e.startInformers(ctx); err != nil {
		return nil, err
	}
	switch {
	case cfg.LeaderElection:
		if err := e.startLeaderElection(ctx); err != nil {
			return nil, err
		}
	case cfg.FollowLease != "":
		go e.followLease(ctx)
	default:
		e.setLeader(true)
	}
	go e.sweep(ctx)

	mux := http.NewServeMux()
	mux.HandleFunc(FilterPath, e.handleFilter)
	mux.HandleFunc(PrioritizePath, e.handlePrioritize)
	mux.HandleFunc(BindPath, e.handleBind)
	mux.Handle("/metrics", promhttp.HandlerFor(e.metrics.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", e.handleReady)
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("extender: listening on %s: %w", cfg.Addr, err)
	}
	e.listener = ln
	srv := &http.Server{Handler: mux, TLSConfig: tlsCfg, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	go func() {
		defer close(e.done)
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.err = fmt.Errorf("extender: serving: %w", err)
		}
	}()
	e.log.Info("runplane extender serving", "addr", ln.Addr().String(), "leaderElection", cfg.LeaderElection)
	return e, nil
}

// Wait blocks until the server has stopped and returns its error.
func (e *Extender) Wait() error {
	<-e.done
	return e.err
}

// Addr is the address the extender listens on.
func (e *Extender) Addr() string { return e.listener.Addr().String() }

// CACert is the PEM certificate the scheduler must trust to reach the
// extender (the generated CA, or the certificate file read at startup).
func (e *Extender) CACert() []byte { return e.caPEM }

// IsLeader reports whether this replica binds.
func (e *Extender) IsLeader() bool { return e.isLeader() }

func (e *Extender) isLeader() bool { return e.leader.Load() }

func (e *Extender) setLeader(v bool) {
	e.leader.Store(v)
	if v {
		e.metrics.leader.Set(1)
	} else {
		e.metrics.leader.Set(0)
	}
}

func (e *Extender) handleReady(w http.ResponseWriter, _ *http.Request) {
	for _, s := range e.synced {
		if !s() {
			http.Error(w, "informers not synced", http.StatusServiceUnavailable)
			return
		}
	}
	if !e.catalog.HasSynced() {
		http.Error(w, "catalog not synced", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok"))
}

func (e *Extender) sweep(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.ledger.Sweep()
			e.intents.sweep(time.Minute)
		}
	}
}

// stripManaged drops managed fields: the ledger never reads them and at
// 50,000 Pods they dominate the informer's memory.
func stripManaged(obj any) (any, error) {
	if m, ok := obj.(metav1.ObjectMetaAccessor); ok {
		m.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}

func (e *Extender) startInformers(ctx context.Context) error {
	f := informers.NewSharedInformerFactoryWithOptions(e.client, 0, informers.WithTransform(stripManaged))
	podInf := f.Core().V1().Pods()
	nodeInf := f.Core().V1().Nodes()
	e.podLister = podInf.Lister()
	_, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { e.ledger.UpsertPod(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { e.ledger.UpsertPod(obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				e.ledger.DeletePod(p.UID)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("extender: pod informer: %w", err)
	}
	_, err = nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { e.ledger.UpsertNode(obj.(*corev1.Node)) },
		UpdateFunc: func(_, obj any) { e.ledger.UpsertNode(obj.(*corev1.Node)) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				e.ledger.DeleteNode(n.Name)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("extender: node informer: %w", err)
	}
	e.synced = []cache.InformerSynced{podInf.Informer().HasSynced, nodeInf.Informer().HasSynced}
	f.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), e.synced...) {
		return fmt.Errorf("extender: pod and node informers did not sync: %w", syncCtx.Err())
	}
	return nil
}

// followLease binds while the followed Lease is held, unexpired, by this
// host: the co-located kube-scheduler leads.
func (e *Extender) followLease(ctx context.Context) {
	ns, name, _ := strings.Cut(e.cfg.FollowLease, "/")
	host, _ := os.Hostname()
	t := time.NewTicker(e.cfg.RetryPeriod)
	defer t.Stop()
	for {
		lease, err := e.client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		held := err == nil && lease.Spec.HolderIdentity != nil && lease.Spec.RenewTime != nil &&
			lease.Spec.LeaseDurationSeconds != nil &&
			strings.HasPrefix(*lease.Spec.HolderIdentity, host+"_") &&
			time.Since(lease.Spec.RenewTime.Time) < time.Duration(*lease.Spec.LeaseDurationSeconds)*time.Second
		if held != e.isLeader() {
			e.log.Info("runplane extender follows the scheduler's Lease", "lease", e.cfg.FollowLease, "binding", held)
			e.setLeader(held)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (e *Extender) startLeaderElection(ctx context.Context) error {
	id := e.cfg.Identity
	if id == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		id = host + "_" + hex.EncodeToString(b)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: e.cfg.LeaseName},
		Client:     e.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   e.cfg.LeaseDuration,
		RenewDeadline:   e.cfg.RenewDeadline,
		RetryPeriod:     e.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            e.cfg.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				e.log.Info("runplane extender leading", "identity", id)
				e.setLeader(true)
			},
			OnStoppedLeading: func() {
				e.log.Info("runplane extender stopped leading", "identity", id)
				e.setLeader(false)
			},
		},
	})
	if err != nil {
		return fmt.Errorf("extender: leader election: %w", err)
	}
	// A lost Lease is retried: the replica keeps its ledger warm and binds
	// again once it leads.
	go func() {
		for ctx.Err() == nil {
			le.Run(ctx)
		}
	}()
	return nil
}
