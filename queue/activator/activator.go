// Package activator is the queue service's dispatcher: the Lease holder
// (a controller-runtime Runnable with NeedLeaderElection; sharded, one
// Activator per shard of the namespaces, on its Lease's holder: Shard,
// shard.go, queue/shard) consumes
// invocations from JetStream through durable consumers and dispatches each
// to the least-loaded ready worker, writes terminal Records from results,
// redelivers a lost worker's invocations with backoff, dead-letters them
// after MaxAttempts and scales each pool's Deployment through its scale
// subresource. The decisions live in the pure internal/state package; this
// package is the I/O around it: consumers (consume.go), Record writes and
// publishes (dispatch.go, workers.go), the rebuild from the stream and the
// Records bucket at start (rebuild.go), Pods and scaling (scale.go).
package activator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/internal/tracing"
	"github.com/runplane/runplane/queue/activator/internal/state"
	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/queue/stream"
)

// Config configures an Activator.
type Config struct {
	Store *stream.Store
	NC    *nats.Conn
	// Pools says which pools exist and their policy.
	Pools pool.Source
	// Kube, when set, gives the Pod view of workers and scaling through the
	// Deployment scale subresource. Nil: workers come from Events only and
	// nothing is scaled (unless Scaler is set).
	Kube kubernetes.Interface
	// Cache, required with Kube, is where the Pods and ReplicaSets of the
	// pools are read from: the manager's (pool.CacheOptions).
	Cache Cache
	// Scaler overrides the Kubernetes scaler (benchmarks, tests of pure logic).
	Scaler Scaler
	// Revoke, when set, is told each worker whose NATS access must end: its
	// Pod is deleted or has ended, or its pool label changed (the Pod
	// informer's view). It must not block.
	Revoke func(ns, pool, worker string)
	// Decisions are the settings the pure core applies (internal/state):
	// the configuration file's workers and limits sections, redelivery
	// backoff, execution grace, drain hold. Passed to it as they are,
	// defaulted by its Default. The activator enforces the in-flight
	// bounds (a pool's runplane.io/max-in-flight or
	// Limits.PoolMaxInFlight, and Limits.NamespaceMaxInFlight); the
	// backlog bounds are the ingress's.
	Decisions
	// Tick is the period of liveness, TTL, scaling and status checks
	// (default 250ms).
	Tick time.Duration
	// RunningDelay is how long a worker must have been running an
	// invocation before its Record says running (default 25ms; negative:
	// at once). A result within it moves the Record from dispatched
	// straight to its final state: one write fewer for short invocations,
	// for which a running state could hardly be seen anyway.
	RunningDelay time.Duration
	// ResultAckWait is the results consumer's ack wait (default 5s). After
	// a restart, results delivered to the previous leader but not acked
	// come back after it; a lost worker's invocations are not redelivered
	// before then.
	ResultAckWait time.Duration
	// PurgeEvery is the shortest time between two rounds of removing
	// finished invocations' messages from the stream (default
	// DefaultPurgeEvery): purge.go.
	PurgeEvery time.Duration
	// SweepEvery is how often the invocation stream is swept for what
	// finished invocations left in it (default DefaultSweepEvery; and once
	// at each start): see sweep.
	SweepEvery time.Duration
	// ConsumerPrefix names the durable consumers (default "activator";
	// a shard's: "<prefix>-<index>of<count>").
	ConsumerPrefix string
	// Shard, when sharded (Count > 1), limits this activator to the
	// namespaces of one shard: their pools, invocations, results, workers
	// and Pods; every other namespace is another shard's owner's
	// (queue/shard, README "Sharded activator").
	Shard Shard
	// Clock is the time source (default the real clock; tests step a fake).
	Clock  clock.WithTickerAndDelayedExecution
	Logger *slog.Logger
	// Registerer receives the metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Metrics, when set, are used instead of new ones registered with
	// Registerer: the shards of one replica share them.
	Metrics *Metrics

	// TracerProvider records the activator's dispatch spans (nil: none;
	// an invocation's trace context still reaches its Dispatch).
	TracerProvider trace.TracerProvider
}

func (c Config) withDefaults() Config {
	c.Decisions.Default()
	c.Tick = cmp.Or(c.Tick, 250*time.Millisecond)
	c.RunningDelay = cmp.Or(c.RunningDelay, 25*time.Millisecond)
	c.ResultAckWait = cmp.Or(c.ResultAckWait, 5*time.Second)
	c.SweepEvery = cmp.Or(c.SweepEvery, DefaultSweepEvery)
	c.PurgeEvery = cmp.Or(c.PurgeEvery, DefaultPurgeEvery)
	c.ConsumerPrefix = cmp.Or(c.ConsumerPrefix, "activator")
	c.Logger = cmp.Or(c.Logger, slog.Default())
	c.Clock = cmp.Or[clock.WithTickerAndDelayedExecution](c.Clock, clock.RealClock{})
	return c
}

// Activator dispatches and scales: the I/O around a state.State. Create
// with New; the manager runs it (Start) on the Lease holder.
type Activator struct {
	cfg    Config
	scaler Scaler
	// events records Events on pool Deployments (conflicts, scaling);
	// set by Run, read under mu.
	events  events.EventRecorder
	metrics *metrics
	// tracer: the dispatch spans (trace.go).
	tracer tracing.Tracer

	mu sync.Mutex
	st *state.State
	// kick wakes the loop to dispatch now; wg counts the goroutines doing
	// a decision's I/O, waited for before Run returns.
	kick chan struct{}
	wg   sync.WaitGroup
	// purgeKick asks purgeLoop for a round. invokeGen counts the invoke
	// consumer's makings (an ack floor read from an older one is not
	// used); ackFloor and ackFloorGen are the last read, touched by the
	// purge loop only.
	purgeKick   chan struct{}
	invokeGen   atomic.Uint64
	ackFloor    uint64
	ackFloorGen uint64
	// purgeFailures reports purge rounds that fail (purge loop only).
	purgeFailures failureReport
	// proving: an ask of how far the invoke consumer handled the stream
	// is under way (proveIntake); streamLast is what the last two read of
	// the stream (written by those asks, and emptied by Run, whose new
	// state counts epochs from 1 again).
	proving    atomic.Bool
	streamLast [2]streamLast // the newest first

	// podMu makes deciding whether a Pod is a worker and applying that to
	// the state one step: the Pod, ReplicaSet and pool informers decide on
	// their own goroutines, and a refusal read before a ReplicaSet arrived
	// must not land after the admission its arrival decided (issue 33).
	// watchPods takes it once its handlers are removed: a decision begun
	// before has been applied, and one after sees the activator stopped.
	podMu sync.Mutex
	// refused remembers the Pods refused as workers (namespace/name → why),
	// to log and count each refusal once.
	refusedMu sync.Mutex
	refused   map[string]string
	// conflicts are the reported pool conflicts (namespace/pool → names),
	// policyErrs the reported invalid policies (namespace/deployment →
	// error), touched only by Run's goroutine.
	conflicts  map[string]string
	policyErrs map[string]string
	// legacy remembers the pools warned about for Events on the pool's
	// subject (sidecars older than the per-worker Events subjects).
	legacy legacyEvents
	// filtered are the namespaces the consumers filter on (sharded; under
	// mu): those of the open invocations rebuilt, then every one added.
	filtered map[string]bool
}

// DefaultSweepEvery is the default of Config.SweepEvery.
const DefaultSweepEvery = 5 * time.Minute

// Decisions are the settings the activator's decisions apply
// (Config.Decisions); Workers is the configuration file's workers section.
// Defined in the pure core, which takes them as they are.
type (
	Decisions = state.Config
	Workers   = state.Workers
)

// New validates cfg and builds an Activator.
func New(cfg Config) (*Activator, error) {
	cfg = cfg.withDefaults()
	if cfg.Store == nil || cfg.NC == nil {
		return nil, errors.New("activator: Store and NC are required")
	}
	if cfg.Pools == nil {
		return nil, errors.New("activator: Pools is required")
	}
	if err := cfg.Workers.Validate(); err != nil {
		return nil, fmt.Errorf("activator: %w", err)
	}
	m := cfg.Metrics
	if m == nil {
		m = NewMetrics(cfg.Registerer)
	}
	a := &Activator{cfg: cfg, metrics: m.m, scaler: cfg.Scaler, refused: map[string]string{}, conflicts: map[string]string{},
		policyErrs: map[string]string{}, tracer: tracing.NewTracer(cfg.TracerProvider, "runplane/queue/activator"),
		purgeFailures: failureReport{what: "removing finished invocations' messages from the stream", every: time.Minute}}
	if cfg.Shard.Sharded() {
		if cfg.Shard.Index < 0 || cfg.Shard.Index >= cfg.Shard.Count {
			return nil, fmt.Errorf("activator: shard %d of %d: must be in [0, %d)", cfg.Shard.Index, cfg.Shard.Count, cfg.Shard.Count)
		}
		a.cfg.Pools = ownedPools{Source: cfg.Pools, shard: cfg.Shard}
	}
	if cfg.Kube != nil && cfg.Cache == nil {
		return nil, errors.New("activator: a Kubernetes client needs the cache of the pools' Pods and ReplicaSets")
	}
	if a.scaler == nil && cfg.Kube != nil {
		a.scaler = KubeScaler{Client: cfg.Kube}
	}
	return a, nil
}

// Run rebuilds state from JetStream and dispatches until ctx ends; it
// returns once every goroutine it started has.
func (a *Activator) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); a.wg.Wait() }()
	a.mu.Lock()
	d := a.cfg.Decisions
	// With Kubernetes, only Pods owned by their pool's Deployment are
	// workers; without (make dev -no-kube, tests), sidecar Events are.
	d.RequirePods = a.cfg.Kube != nil
	a.st = state.New(d, a.cfg.Clock)
	a.kick = make(chan struct{}, 1)
	a.purgeKick = make(chan struct{}, 1)
	a.ackFloor, a.ackFloorGen = 0, a.invokeGen.Load()
	a.streamLast = [2]streamLast{}
	a.filtered = map[string]bool{}
	a.mu.Unlock()
	rebuilt := false
	defer func() {
		if rebuilt {
			a.metrics.rebuilt.Dec()
		}
	}()
	st := a.cfg.Store

	if a.cfg.Kube != nil {
		a.wg.Go(func() { a.watchPods(ctx) })
	}
	// Events first, so workers alive before a restart are seen quickly.
	// Every Events subject (and the pools' root subjects, where older
	// sidecars published): onEvent tells them apart.
	sub, err := a.cfg.NC.Subscribe(st.Subjects.Prefix+".metrics.>", func(m *nats.Msg) { a.onEvent(ctx, m) })
	if err != nil {
		return fmt.Errorf("subscribe to worker events: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// Messages that reached a consumer's MaxDeliver are dead-lettered.
	for _, name := range []string{st.Config.Stream, st.Config.ResultsStream} {
		adv, err := a.cfg.NC.Subscribe(maxDeliveriesSubject(name), func(m *nats.Msg) { a.onMaxDeliveries(ctx, m) })
		if err != nil {
			return fmt.Errorf("subscribe to max-deliveries advisories: %w", err)
		}
		defer func() { _ = adv.Unsubscribe() }()
	}
	// Nothing is dispatched or consumed before the state is rebuilt.
	if err := a.rebuild(ctx); err != nil {
		return err
	}
	a.metrics.rebuilt.Inc()
	rebuilt = true
	a.wg.Go(func() { a.sweepLoop(ctx) })
	a.wg.Go(func() { a.purgeLoop(ctx) })
	if err := a.keepFiltered(ctx); err != nil {
		return err
	}
	cons := &consumers{nss: a.namespaces()}
	a.mu.Lock()
	for _, ns := range cons.nss {
		a.filtered[ns] = true
	}
	a.mu.Unlock()
	onResult := func(ctx context.Context, _ uint64, m jetstream.Msg) { a.onResult(ctx, m) }
	if cons.results, err = a.consume(ctx, st.Config.ResultsStream, "results", cons.nss, a.cfg.ResultAckWait, onResult); err != nil {
		return err
	}
	defer cons.results.Stop()
	if cons.invoke, err = a.consume(ctx, st.Config.Stream, "invoke", cons.nss, 30*time.Second, a.onInvocation); err != nil {
		return err
	}
	defer func() { cons.invoke.Stop() }()
	a.wg.Go(func() { a.dropLegacyConsumers(ctx) })
	a.cfg.Logger.Info("activator running", "stream", st.Config.Stream, "shards", max(a.cfg.Shard.Count, 1), "namespaces", len(cons.nss))

	tick := a.cfg.Clock.NewTicker(a.cfg.Tick)
	defer tick.Stop()
	var conflictRec events.EventRecorder
	if a.cfg.Kube != nil {
		conflictRec = a.conflictRecorder(ctx)
	}
	a.locked(func(*state.State) { a.events = conflictRec })
	var proved time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.kick:
			a.dispatchAll(ctx)
			if a.scaler != nil {
				// Scale from zero without waiting for the tick.
				a.scaleAll(ctx)
			}
		case <-tick.C():
			if conflictRec != nil {
				a.reportConflicts(ctx, conflictRec)
				a.reportPolicies(ctx, conflictRec)
			}
			if err := a.refilter(ctx, cons); err != nil {
				return err
			}
			if now := a.cfg.Clock.Now(); now.Sub(proved) >= proofEvery {
				proved = now
				a.proveIntake(ctx, cons.invoke)
			}
			a.housekeep(ctx)
			a.dispatchAll(ctx)
		}
	}
}

func (a *Activator) poke() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// locked runs fn on the state under the lock.
func (a *Activator) locked(fn func(s *state.State)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fn(a.st)
}
