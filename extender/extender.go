package extender

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/extender/ledger"
	"github.com/runplane/runplane/internal/logging"
	"github.com/runplane/runplane/internal/metricsauth"
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
	// nodeLister: the nodes a DRA takeover may use (drastock.go).
	nodeLister listersv1.NodeLister
	// draStock queues the claims of GPU Pods that may take DRA stock.
	draStock *draStock
	// deletePod deletes a placeholder (deletePod(client); tests use the
	// fake clientset's typed Delete, whose REST client is nil).
	deletePod func(ctx context.Context, ns, name string, opts *metav1.DeleteOptions) (runtime.Object, error)
	// cache is the manager's: the informers of everything the extender
	// watches. handlersSynced report whether the ledger's event handlers
	// were handed every listed object; synced is set once both are.
	cache          ctrlcache.Cache
	handlersSynced []cache.InformerSynced
	synced         atomic.Bool
	intents        intents
	// preempts carries the filter's preemption plans to evictVictims;
	// guard tells the ledger which Pods a PodDisruptionBudget protects.
	preempts chan preemption
	guard    disruptionGuard
	// reserveKick wakes reconcileReservations (a new nomination).
	reserveKick chan struct{}
	buffers     sync.Pool // *buffers
	leader      atomic.Bool
	listener    net.Listener
	// metricsListener serves /metrics and the probes when
	// Config.Metrics.BindAddress is set.
	metricsListener net.Listener
	// events records bind Events (events.go); nil records none.
	events events.EventRecorder
	caPEM  []byte
	done   chan struct{}
	err    error
}

// Run starts an extender and serves until ctx ends (the binary's). With
// PprofAddr it samples the process's mutex and block profiles too (lock
// contention in the ledger, waits on the API).
func Run(ctx context.Context, cfg Config) error {
	if cfg.PprofAddr != "" {
		goruntime.SetMutexProfileFraction(100)
		goruntime.SetBlockProfileRate(int(time.Millisecond))
	}
	e, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	return e.Wait()
}

// Start runs the extender as a controller-runtime manager: the Pod and Node
// informers, the HTTPS server (a manager.Server) and, with LeaderElection,
// the manager's Lease election (the extender binds while it leads). It
// returns once the informers have synced and the server listens;
// everything stops, gracefully, when ctx ends.
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
	client, err := kubernetes.NewForConfig(protobuf(rc))
	if err != nil {
		return nil, fmt.Errorf("extender: building client: %w", err)
	}
	tlsCfg, caPEM, err := servingTLS(ctx, cfg.TLS, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("extender: %w", err)
	}
	e := &Extender{
		cfg: cfg, log: cfg.Logger, client: client, caPEM: caPEM, done: make(chan struct{}),
		ledger: ledger.New(ledger.Options{Clock: cfg.Clock, ReservationNamespace: cfg.Namespace,
			MaxEvictionsPerPod: cfg.Preemption.MaxEvictionsPerPod, MaxEvictionsPerNode: cfg.Preemption.MaxEvictionsPerNode, PreemptBackoff: cfg.Preemption.Backoff.Duration}),
		reserveKick: make(chan struct{}, 1),
		intents:     intents{clock: cfg.Clock}, deletePod: deletePod(client),
		preempts: make(chan preemption, preemptQueue),
		events:   eventRecorder(ctx, client),
	}
	metricsTLS := tlsCfg
	servingCert, err := cfg.Metrics.ServingCert()
	if err != nil {
		return nil, fmt.Errorf("extender: %w", err)
	}
	keeper, err := servingCert.Keeper(client, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("extender: %w", err)
	}
	if keeper != nil {
		// Loaded before the listener serves it.
		if err := keeper.Init(ctx); err != nil {
			return nil, fmt.Errorf("extender: %w", err)
		}
		if metricsTLS, err = metricsauth.TLS(keeper, ""); err != nil {
			return nil, fmt.Errorf("extender: %w", err)
		}
	}
	if e.metrics, err = newMetrics().registered(); err != nil {
		return nil, err
	}
	mgr, err := manager.New(rc, manager.Options{
		Logger: logging.Manager(cfg.Logger), // its own Lease release at shutdown is not an ERROR
		Cache:  cacheOptions(cfg),
		// Metrics and probes are served on the extender's HTTPS listener.
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		PprofBindAddress:              cfg.PprofAddr,
		LeaderElection:                *cfg.LeaderElection.LeaderElect,
		LeaderElectionID:              cfg.LeaderElection.ResourceName,
		LeaderElectionNamespace:       cfg.Namespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &cfg.LeaderElection.LeaseDuration.Duration,
		RenewDeadline:                 &cfg.LeaderElection.RenewDeadline.Duration,
		RetryPeriod:                   &cfg.LeaderElection.RetryPeriod.Duration,
	})
	if err != nil {
		return nil, fmt.Errorf("extender: new manager: %w", err)
	}
	if err := e.informers(ctx, mgr.GetCache()); err != nil {
		return nil, err
	}
	e.listener, err = net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("extender: listening on %s: %w", cfg.Addr, err)
	}
	verbs, observe := http.NewServeMux(), http.NewServeMux()
	e.routeVerbs(verbs)
	runnables := []manager.Runnable{always(e.sweep), always(e.evictVictims), always(e.reconcileReservations), always(e.takeDRAStock), server("runplane-extender", verbs, e.listener, verbsTLS(tlsCfg))}
	metricsHandler, err := e.metricsHandler(cfg)
	if err != nil {
		_ = e.listener.Close()
		return nil, err
	}
	if cfg.Metrics.BindAddress == "" {
		e.routeObservability(verbs, metricsHandler)
	} else {
		if e.metricsListener, err = net.Listen("tcp", cfg.Metrics.BindAddress); err != nil {
			_ = e.listener.Close()
			return nil, fmt.Errorf("extender: listening on %s: %w", cfg.Metrics.BindAddress, err)
		}
		e.routeObservability(observe, metricsHandler)
		runnables = append(runnables, server("runplane-extender-metrics", observe, e.metricsListener, metricsTLS))
		if keeper != nil {
			runnables = append(runnables, keeper)
		}
	}
	if cfg.Stock.Namespace != "" {
		runnables = append(runnables, always(func(ctx context.Context) error { return e.stockStatus(ctx, cfg.Stock.StatusPeriod.Duration) }))
	}
	if cfg.LeaderElection.FollowLease != "" {
		follow, err := e.followLease(ctx)
		if err != nil {
			return nil, err
		}
		runnables = append(runnables, follow)
	} else {
		// Binding while the manager leads: a RunnableFunc needs leader
		// election, and without LeaderElection it starts at once.
		runnables = append(runnables, manager.RunnableFunc(e.lead))
	}
	for _, r := range runnables {
		if err := mgr.Add(r); err != nil {
			_ = e.listener.Close()
			if e.metricsListener != nil {
				_ = e.metricsListener.Close()
			}
			return nil, fmt.Errorf("extender: adding runnable: %w", err)
		}
	}
	mgrCtx, stop := context.WithCancel(ctx)
	go func() {
		defer close(e.done)
		defer stop()
		if err := mgr.Start(mgrCtx); err != nil {
			e.err = fmt.Errorf("extender: %w", err)
		}
	}()
	syncCtx, cancel := context.WithTimeout(mgrCtx, 2*time.Minute)
	defer cancel()
	if !e.waitSynced(syncCtx) {
		stop()
		if err := e.Wait(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("extender: informers (pods, nodes, PodDisruptionBudgets, DRA classes, slices and claims, the catalog, the followed Lease) did not sync: %w", syncCtx.Err())
	}
	// A spec whose resources the scheduler does not send here would be
	// placed with no capacity check at all: refuse to start (request
	// checks each spec again, so nothing is placed unchecked meanwhile).
	if err := e.catalog.Catalog().CheckManaged(cfg.ManagedResources); err != nil {
		stop()
		return nil, errors.Join(fmt.Errorf("extender: %w", err), e.Wait())
	}
	if err := scrapeGauges(e.ledger, map[string]*tls.Config{"verbs": tlsCfg, "metrics": metricsTLS}); err != nil {
		stop()
		return nil, errors.Join(err, e.Wait())
	}
	e.log.Info("runplane extender serving", "addr", e.listener.Addr().String(), "leaderElection", *cfg.LeaderElection.LeaderElect, "followLease", cfg.LeaderElection.FollowLease)
	return e, nil
}

// verbsTLS is the verbs listener's TLS configuration: tlsCfg with HTTP/2
// offered. kube-scheduler's extender client speaks HTTP/2 when offered
// (k8s.io/apimachinery SetTransportDefaults); over HTTP/1.1 each bind in
// flight (binds run concurrently and wait on the API server) needs its own
// connection, and those beyond the client's idle pool are closed and
// re-dialled — in BindThroughput a TLS handshake took 13% of the
// runplane-scheduler's CPU. HTTP/2 carries every call on one connection.
// Only this listener, on loopback where only the scheduler of the Pod
// reaches it, offers HTTP/2; the metrics listener, reachable from the
// network, keeps HTTP/1.1 (controller-runtime's servers leave HTTP/2 off
// for CVE-2023-44487, rapid reset).
func verbsTLS(tlsCfg *tls.Config) *tls.Config {
	cfg := tlsCfg.Clone()
	cfg.NextProtos = []string{"h2", "http/1.1"}
	return cfg
}

// server serves mux over TLS on l as a manager runnable. net/http serves
// HTTP/2 when the TLS configuration offers "h2" (verbsTLS).
func server(name string, mux http.Handler, l net.Listener, tlsCfg *tls.Config) *manager.Server {
	return &manager.Server{
		Name:            name,
		Server:          &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		Listener:        tls.NewListener(l, tlsCfg),
		ShutdownTimeout: ptr.To(5 * time.Second),
	}
}

// routeVerbs routes the extender verbs.
func (e *Extender) routeVerbs(mux *http.ServeMux) {
	mux.HandleFunc(FilterPath, e.handleFilter)
	mux.HandleFunc(PrioritizePath, e.handlePrioritize)
	mux.HandleFunc(BindPath, e.handleBind)
}

// metricsHandler serves controller-runtime's registry — the extender's
// metrics and the manager's (leader election, client-go) — to scrapers
// RBAC allows get on /metrics.
func (e *Extender) metricsHandler(cfg Config) (http.Handler, error) {
	h, err := metricsauth.Handler(cfg.RESTConfig, logr.FromSlogHandler(cfg.Logger.Handler()), ctrlmetrics.Registry)
	if err != nil {
		return nil, fmt.Errorf("extender: %w", err)
	}
	return h, nil
}

// routeObservability routes /metrics and the health probes.
func (e *Extender) routeObservability(mux *http.ServeMux, metrics http.Handler) {
	mux.Handle(metricsauth.Path, metrics)
	probes := map[string]*healthz.Handler{
		"/healthz": {Checks: map[string]healthz.Checker{"ping": healthz.Ping}},
		"/readyz":  {Checks: map[string]healthz.Checker{"informers": e.informersSynced, "catalog": e.catalogSynced}},
	}
	for path, h := range probes {
		mux.Handle(path, http.StripPrefix(path, h))
		mux.Handle(path+"/", http.StripPrefix(path, h))
	}
}

// Wait blocks until the manager has stopped and returns its error.
func (e *Extender) Wait() error {
	<-e.done
	return e.err
}

// Addr is the address the extender's verbs listen on.
func (e *Extender) Addr() string { return e.listener.Addr().String() }

// MetricsAddr is the address of /metrics and the probes: Addr unless
// Config.Metrics.BindAddress is set.
func (e *Extender) MetricsAddr() string {
	if e.metricsListener == nil {
		return e.Addr()
	}
	return e.metricsListener.Addr().String()
}

// CACert is the PEM certificate the scheduler must trust to reach the
// extender (the generated CA, or the certificate file read at startup).
func (e *Extender) CACert() []byte { return e.caPEM }

// IsLeader reports whether this replica binds.
func (e *Extender) IsLeader() bool { return e.isLeader() }

func (e *Extender) isLeader() bool { return e.leader.Load() }

// waitSynced blocks until the cache has synced (Pods, Nodes,
// PodDisruptionBudgets, DRA objects, the catalog, the followed Lease) and the ledger has
// been handed every listed object, or ctx ends (false). Nothing leads
// before: a leader with a partial ledger would reserve and bind into
// capacity whose Pods it has not seen yet, and release as stale the
// reservations of preemptors it has not seen yet (TestLeadsOnlyOnceSynced).
func (e *Extender) waitSynced(ctx context.Context) bool {
	if !e.cache.WaitForCacheSync(ctx) || !cache.WaitForCacheSync(ctx.Done(), e.handlersSynced...) {
		return false
	}
	e.synced.Store(true)
	return true
}

// lead binds while ctx lasts (the manager's Lease). The manager contends
// for the Lease once its cache's stores have synced, but the ledger's
// event handlers trail the stores (at 50,000 Pods by seconds), and a Lease
// released by a predecessor is won at once: bind only once the ledger
// holds every Pod, Node and reservation (waitSynced).
func (e *Extender) lead(ctx context.Context) error {
	if !e.waitSynced(ctx) {
		return nil
	}
	e.setLeader(true)
	<-ctx.Done()
	e.setLeader(false)
	return nil
}

func (e *Extender) setLeader(v bool) {
	if e.leader.Swap(v) != v {
		e.log.Info("runplane extender binding", "binding", v)
		if v && e.draStock != nil {
			// Claims a non-leader saw (and a dead leader left) are this
			// leader's to hand over now: their Pods may see no event again.
			e.draStock.resync()
		}
	}
	if v {
		e.metrics.leader.Set(1)
	} else {
		e.metrics.leader.Set(0)
	}
}

// always is a runnable that runs whether or not the manager leads: a
// non-leader keeps its ledger warm and answers filter and prioritize.
type always func(context.Context) error

func (f always) Start(ctx context.Context) error { return f(ctx) }

func (always) NeedLeaderElection() bool { return false }

func (e *Extender) informersSynced(*http.Request) error {
	if !e.synced.Load() {
		return errors.New("informers (pods, nodes, PodDisruptionBudgets, DRA classes, slices and claims, the followed Lease) not synced")
	}
	return nil
}

func (e *Extender) catalogSynced(*http.Request) error {
	if !e.catalog.HasSynced() {
		return errors.New("catalog not synced")
	}
	return nil
}

func (e *Extender) sweep(ctx context.Context) error {
	wait.UntilWithContext(ctx, func(context.Context) {
		e.ledger.Sweep()
		e.intents.sweep(time.Minute)
	}, time.Second)
	return nil
}

// protobuf is rc speaking protobuf, as kube-scheduler and the controller
// manager do, for the clientset (built-in types only; the manager keeps rc,
// its clients choose per type). The API server encodes each watch event
// once per format its watchers ask for: a JSON Pod watch cost it a JSON
// encoding of every Pod event besides the protobuf one the schedulers get,
// and the extender a JSON decoding.
func protobuf(rc *rest.Config) *rest.Config {
	if rc.ContentType != "" {
		return rc
	}
	pb := rest.CopyConfig(rc)
	pb.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	pb.ContentType = runtime.ContentTypeProtobuf
	return pb
}

// cacheOptions is what the manager's cache keeps: every object without
// its managed fields (the ledger never reads them and at 50,000 Pods they
// dominate the informers' memory), of ConfigMaps only the catalog and of
// Leases only the followed one (RBAC grants list and watch on their names
// only, which needs the field selector).
func cacheOptions(cfg Config) ctrlcache.Options {
	o := ctrlcache.Options{DefaultTransform: ctrlcache.TransformStripManagedFields(),
		ByObject: map[client.Object]ctrlcache.ByObject{&corev1.ConfigMap{}: catalog.CacheConfig(cfg.Namespace)}}
	if ns, name, ok := strings.Cut(cfg.LeaderElection.FollowLease, "/"); ok {
		o.ByObject[&coordinationv1.Lease{}] = ctrlcache.ByObject{
			Namespaces: map[string]ctrlcache.Config{ns: {}},
			Field:      fields.OneTermEqualSelector("metadata.name", name),
		}
	}
	return o
}

// sharedInformers are c's informers of objs, started with the manager.
// The extender reads through client-go listers on their stores rather
// than through the cache's reader: reads in event handlers (which have no
// context) and on every filter must neither wait for a sync nor copy the
// object. controller-runtime's cluster-wide informers are client-go's
// SharedIndexInformers (a namespaced one is not: the followed Lease).
func sharedInformers(ctx context.Context, c ctrlcache.Cache, objs ...client.Object) ([]cache.SharedIndexInformer, error) {
	out := make([]cache.SharedIndexInformer, len(objs))
	for i, obj := range objs {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return nil, fmt.Errorf("extender: informer of %T: %w", obj, err)
		}
		var ok bool
		if out[i], ok = inf.(cache.SharedIndexInformer); !ok {
			return nil, fmt.Errorf("extender: the cache's informer of %T is a %T, not a SharedIndexInformer", obj, inf)
		}
	}
	return out, nil
}

// informers feed the ledger from the cache's Pod, Node and DRA informers.
func (e *Extender) informers(ctx context.Context, c ctrlcache.Cache) error {
	e.cache = c
	infs, err := sharedInformers(ctx, c, &corev1.Pod{}, &corev1.Node{}, &policyv1.PodDisruptionBudget{},
		&resourcev1.DeviceClass{}, &resourcev1.ResourceSlice{}, &resourcev1.ResourceClaim{})
	if err != nil {
		return err
	}
	pods, nodes, pdbs := infs[0], infs[1], infs[2]
	e.podLister = listersv1.NewPodLister(pods.GetIndexer())
	e.nodeLister = listersv1.NewNodeLister(nodes.GetIndexer())
	e.guard = disruptionGuard{lister: policylisters.NewPodDisruptionBudgetLister(pdbs.GetIndexer())}
	podReg, err := pods.AddEventHandler(feed(e.ledger.UpsertPod, func(p *corev1.Pod) { e.ledger.DeletePod(p.UID) }))
	if err != nil {
		return fmt.Errorf("extender: pod informer: %w", err)
	}
	nodeReg, err := nodes.AddEventHandler(feed(e.ledger.UpsertNode, func(n *corev1.Node) { e.ledger.DeleteNode(n.Name) }))
	if err != nil {
		return fmt.Errorf("extender: node informer: %w", err)
	}
	// The registrations' HasSynced besides the cache's: an informer has
	// synced once its store holds the list, but the ledger has it only once
	// the handler has been handed every listed object — claims a
	// predecessor left must be recovered before this extender makes any.
	e.handlersSynced = []cache.InformerSynced{podReg.HasSynced, nodeReg.HasSynced}
	draSynced, err := e.draInformers(pods, infs[3], infs[4], infs[5])
	if err != nil {
		return err
	}
	e.handlersSynced = append(e.handlersSynced, draSynced...)
	catalogInformer, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		return fmt.Errorf("extender: catalog informer: %w", err)
	}
	if e.catalog, err = catalog.Follow(catalogInformer, e.cfg.Namespace); err != nil {
		return fmt.Errorf("extender: %w", err)
	}
	e.handlersSynced = append(e.handlersSynced, e.catalog.HasSynced)
	return nil
}

// feed hands an informer's objects to the ledger.
func feed[T any](upsert, remove func(T)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { upsert(obj.(T)) },
		UpdateFunc: func(_, obj any) { upsert(obj.(T)) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if o, ok := obj.(T); ok {
				remove(o)
			}
		},
	}
}
