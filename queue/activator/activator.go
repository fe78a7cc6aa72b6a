// Package activator is the queue service's dispatcher: one active instance
// (leader election on a Lease) consumes invocations from JetStream through
// durable consumers, keeps a per-pool state machine of queued and in-flight
// invocations and of workers (known from the pool's Pods and from sidecar
// Events), dispatches each invocation to the least-loaded ready worker
// within its concurrency, writes terminal Records from results, redelivers
// a lost worker's invocations with backoff and dead-letters them after
// MaxAttempts, and scales each pool's Deployment through its scale
// subresource. Everything it needs to resume lives in JetStream: on start it
// rebuilds its state from the Records bucket and the stream.
package activator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/runplane/runplane/queue/messages"
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
	// Namespace scopes the Pod informer ("" = all).
	Namespace string
	// Scaler overrides the Kubernetes scaler (benchmarks, tests of pure logic).
	Scaler Scaler
	// HeartbeatTimeout: a worker silent for this long is lost (default 15s).
	HeartbeatTimeout time.Duration
	// MaxAttempts before an invocation is dead-lettered (default 3).
	MaxAttempts int
	// Backoff is the first redelivery delay, doubled per attempt up to
	// MaxBackoff (defaults 500ms, 30s).
	Backoff, MaxBackoff time.Duration
	// ExecutionGrace is added to timeoutSeconds before the activator stops
	// waiting for a worker's result and records timed_out (default 10s).
	ExecutionGrace time.Duration
	// DrainHold is how long a worker picked for scale-down gets no new work
	// (default 60s).
	DrainHold time.Duration
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
	// ConsumerPrefix names the durable consumers (default "activator").
	ConsumerPrefix string
	Logger         *slog.Logger
	// Registerer receives the metrics (nil: not registered).
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() Config {
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = 15 * time.Second
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
	if c.Backoff == 0 {
		c.Backoff = 500 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.ExecutionGrace == 0 {
		c.ExecutionGrace = 10 * time.Second
	}
	if c.DrainHold == 0 {
		c.DrainHold = 60 * time.Second
	}
	if c.Tick == 0 {
		c.Tick = 250 * time.Millisecond
	}
	if c.RunningDelay == 0 {
		c.RunningDelay = 25 * time.Millisecond
	}
	if c.ResultAckWait == 0 {
		c.ResultAckWait = 5 * time.Second
	}
	if c.ConsumerPrefix == "" {
		c.ConsumerPrefix = "activator"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Activator dispatches and scales. Create with New, run with Run (as the
// elected leader).
type Activator struct {
	cfg     Config
	scaler  Scaler
	metrics *metrics

	mu    sync.Mutex
	pools map[string]*poolState
	items map[string]*item
	// resultSeq is the highest stream sequence the results consumer has
	// delivered: every result stored before it has been seen.
	resultSeq uint64
	kick      chan struct{}
	ctx       context.Context
	wg        sync.WaitGroup
}

type item struct {
	inv          messages.Invocation
	seq          uint64
	attempt      int // last dispatched attempt; 0 = never dispatched
	worker       string
	queued       bool
	notBefore    time.Time
	dispatchedAt time.Time
	scaleMark    time.Time // when it first waited on an empty pool
	// started: the worker reported invocation.started for this attempt.
	started bool
	// strikes counts the losses that count towards MaxAttempts: a worker
	// that deregistered with nothing in flight never ran it.
	strikes int
	// dispatchSeq is the stream sequence of the current attempt's
	// Dispatch (0: unknown), deleted when the attempt is given up.
	dispatchSeq uint64

	// done is set once a result (or the activator's own verdict) is
	// known: pending intermediate writes are skipped.
	done atomic.Bool
	// wmu serialises this invocation's Record writes; rec is the Record as
	// last written or read (under wmu), so most writes need no read.
	wmu sync.Mutex
	rec stream.Cached
}

type worker struct {
	name, pool, namespace string
	concurrency           int
	inflight              map[string]*item
	ready, draining       bool
	registered            bool
	lastSeen, idleSince   time.Time
	drainUntil            time.Time
	pod                   *podInfo
}

type podInfo struct {
	created     time.Time
	ready       bool
	terminating bool
}

type poolState struct {
	name       string
	invokeSeq  uint64 // last invoke stream sequence taken in
	queue      []*item
	workers    map[string]*worker
	lastStatus []byte
	statusAt   time.Time
	scaling    bool
	setTo      int
	setAt      time.Time
	policyErr  string
}

// New validates cfg and builds an Activator.
func New(cfg Config) (*Activator, error) {
	cfg = cfg.withDefaults()
	if cfg.Store == nil || cfg.NC == nil {
		return nil, errors.New("activator: Store and NC are required")
	}
	if cfg.Pools == nil {
		return nil, errors.New("activator: Pools is required")
	}
	if cfg.MaxAttempts < 1 {
		return nil, fmt.Errorf("activator: MaxAttempts %d must be >= 1", cfg.MaxAttempts)
	}
	a := &Activator{cfg: cfg, metrics: newMetrics(cfg.Registerer), scaler: cfg.Scaler}
	if a.scaler == nil && cfg.Kube != nil {
		a.scaler = KubeScaler{Client: cfg.Kube}
	}
	return a, nil
}

// Run rebuilds state from JetStream and dispatches until ctx ends.
func (a *Activator) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.mu.Lock()
	a.pools = map[string]*poolState{}
	a.items = map[string]*item{}
	a.kick = make(chan struct{}, 1)
	a.ctx = ctx
	a.mu.Unlock()
	log := a.cfg.Logger
	st := a.cfg.Store

	if a.cfg.Kube != nil {
		pods := newPodWatcher(a, a.cfg.Kube, a.cfg.Namespace)
		a.wg.Add(1)
		go func() { defer a.wg.Done(); pods.run(ctx) }()
	}
	// Events first, so workers alive before a restart are seen quickly.
	sub, err := a.cfg.NC.Subscribe(st.Subjects.Metrics("*"), a.onEvent)
	if err != nil {
		return fmt.Errorf("subscribe to worker events: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := a.rebuild(ctx); err != nil {
		return err
	}
	results, err := a.consume(ctx, "results", st.Subjects.Result("*"), a.cfg.ResultAckWait, a.onResult)
	if err != nil {
		return err
	}
	defer results.Stop()
	invokes, err := a.consume(ctx, "invoke", st.Subjects.Invoke("*"), 30*time.Second, a.onInvocation)
	if err != nil {
		return err
	}
	defer invokes.Stop()
	log.Info("activator running", "stream", st.Config.Stream)

	tick := time.NewTicker(a.cfg.Tick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			cancel()
			a.wg.Wait()
			return nil
		case <-a.kick:
			a.dispatchAll()
			if a.scaler != nil {
				// Scale from zero without waiting for the tick.
				a.scaleAll(ctx, time.Now())
			}
		case <-tick.C:
			a.housekeep(ctx)
			a.dispatchAll()
		}
	}
}

func (a *Activator) consume(ctx context.Context, name, subject string, ackWait time.Duration, h jetstream.MessageHandler) (jetstream.ConsumeContext, error) {
	st := a.cfg.Store
	c, err := st.JS.CreateOrUpdateConsumer(ctx, st.Config.Stream, jetstream.ConsumerConfig{
		Durable:       a.cfg.ConsumerPrefix + "-" + name,
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       ackWait,
		MaxAckPending: 20000,
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer %s-%s: %w", a.cfg.ConsumerPrefix, name, err)
	}
	if info := c.CachedInfo(); info != nil && name == "results" {
		// Results up to the ack floor were handled by a previous leader.
		a.mu.Lock()
		a.resultSeq = max(a.resultSeq, info.AckFloor.Stream)
		a.mu.Unlock()
	}
	// Consume pulls in batches (up to 500 messages) and hands them over one
	// by one; the handlers never wait on the network for long.
	cc, err := c.Consume(h, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if !errors.Is(err, jetstream.ErrNoHeartbeat) {
			a.cfg.Logger.Debug("consumer error", "consumer", name, "err", err)
		}
	}))
	if err != nil {
		return nil, fmt.Errorf("consume %s: %w", name, err)
	}
	return cc, nil
}

func (a *Activator) poke() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// poolLocked returns (creating) the state of a pool; a.mu must be held.
func (a *Activator) poolLocked(name string) *poolState {
	p := a.pools[name]
	if p == nil {
		p = &poolState{name: name, workers: map[string]*worker{}}
		a.pools[name] = p
	}
	return p
}

// rebuild loads every non-terminal Record and its invocation from the
// stream, so a new leader resumes where the old one stopped.
func (a *Activator) rebuild(ctx context.Context) error {
	st := a.cfg.Store
	w, err := st.Records.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("rebuild: watch records: %w", err)
	}
	defer func() { _ = w.Stop() }()
	type openRec struct {
		rec messages.Record
		rev uint64
	}
	var known []openRec
	unseq := map[string]openRec{} // queued, sequence not recorded yet
	for e := range w.Updates() {
		if e == nil {
			break
		}
		r, err := stream.Decode(e.Value())
		if err != nil || r.State.Terminal() {
			continue
		}
		if r.Sequence == 0 {
			unseq[r.InvocationID] = openRec{r, e.Revision()}
			continue
		}
		known = append(known, openRec{r, e.Revision()})
	}
	_ = w.Stop()
	invs := map[string]messages.Invocation{}
	seqs := map[string]uint64{}
	for _, o := range known {
		m, err := st.Stream.GetMsg(ctx, o.rec.Sequence)
		if err != nil {
			a.cfg.Logger.Warn("rebuild: invocation missing from stream", "invocation", o.rec.InvocationID, "seq", o.rec.Sequence, "err", err)
			continue
		}
		var inv messages.Invocation
		if err := json.Unmarshal(m.Data, &inv); err != nil {
			continue
		}
		invs[inv.InvocationID], seqs[inv.InvocationID] = inv, o.rec.Sequence
	}
	if len(unseq) > 0 {
		// The Record learns its sequence at dispatch: find queued
		// invocations in the stream. Those the invoke consumer has not
		// delivered yet turn up here too; it acks them as known.
		since := time.Now()
		pools := map[string]bool{}
		for _, o := range unseq {
			since = minTime(since, o.rec.AcceptedAt)
			pools[o.rec.Pool] = true
		}
		var subjects []string
		for p := range pools {
			subjects = append(subjects, st.Subjects.Invoke(p))
		}
		err := a.scan(ctx, subjects, since, func(m jetstream.Msg, seq uint64) {
			var inv messages.Invocation
			if json.Unmarshal(m.Data(), &inv) != nil {
				return
			}
			if o, ok := unseq[inv.InvocationID]; ok && o.rec.Pool == inv.Pool {
				if _, dup := invs[inv.InvocationID]; !dup {
					invs[inv.InvocationID], seqs[inv.InvocationID] = inv, seq
					known = append(known, o)
				}
			}
		})
		if err != nil {
			return fmt.Errorf("rebuild: %w", err)
		}
	}
	// A dispatched attempt is published again only when its Dispatch is
	// not in the stream: the Record is written first, and the old leader
	// may have died before publishing. Republishing one that is there would
	// hand the worker a second copy once the duplicate window is over.
	published := map[string]uint64{} // Dispatch publish ID → stream sequence
	var subjects []string
	since := time.Now()
	for _, o := range known {
		if o.rec.State == messages.StateDispatched && o.rec.Worker != "" {
			subjects = append(subjects, st.Subjects.Dispatch(o.rec.Pool, o.rec.Worker))
			since = minTime(since, o.rec.UpdatedAt)
			published[messages.DispatchPublishID(o.rec.InvocationID, o.rec.Attempt)] = 0
		}
	}
	if len(subjects) > 0 {
		slices.Sort(subjects)
		err := a.scan(ctx, slices.Compact(subjects), since, func(m jetstream.Msg, seq uint64) {
			if id := m.Headers().Get(jetstream.MsgIDHeader); id != "" {
				if _, ok := published[id]; ok {
					published[id] = seq
				}
			}
		})
		if err != nil {
			return fmt.Errorf("rebuild: %w", err)
		}
	}

	n, republished := 0, 0
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, o := range known {
		r := o.rec
		inv, ok := invs[r.InvocationID]
		if !ok {
			continue
		}
		it := &item{inv: inv, seq: seqs[r.InvocationID], attempt: r.Attempt, rec: stream.Cached{Record: r, Rev: o.rev}}
		a.items[inv.InvocationID] = it
		p := a.poolLocked(inv.Pool)
		if (r.State == messages.StateDispatched || r.State == messages.StateRunning) && r.Worker != "" {
			// Assume the worker still runs it; heartbeats confirm it, or it
			// is declared lost after HeartbeatTimeout and redelivered.
			wk := p.workers[r.Worker]
			if wk == nil {
				wk = &worker{name: r.Worker, pool: inv.Pool, concurrency: 1, inflight: map[string]*item{}, lastSeen: time.Now()}
				p.workers[r.Worker] = wk
			}
			it.worker = r.Worker
			it.dispatchedAt = r.UpdatedAt
			// Strikes are not recorded; count every earlier attempt.
			it.strikes = max(r.Attempt-1, 0)
			it.started = r.State == messages.StateRunning
			wk.inflight[inv.InvocationID] = it
			if r.State == messages.StateDispatched {
				if seq := published[messages.DispatchPublishID(r.InvocationID, r.Attempt)]; seq != 0 {
					it.dispatchSeq = seq
				} else {
					republished++
					a.wg.Add(1)
					go a.republish(it, r.Worker, r.Attempt)
				}
			}
		} else {
			it.queued = true
			p.queue = append(p.queue, it)
		}
		n++
	}
	a.cfg.Logger.Info("activator rebuilt state", "invocations", n, "republished", republished)
	return nil
}

// scanSlack covers clock skew between the writers of Record times and the
// NATS server that stamps stream messages.
const scanSlack = time.Minute

// scan calls fn with every message on subjects stored since since (less
// scanSlack), oldest first, up to the end of the stream.
func (a *Activator) scan(ctx context.Context, subjects []string, since time.Time, fn func(m jetstream.Msg, seq uint64)) error {
	st := a.cfg.Store
	start := since.Add(-scanSlack)
	c, err := st.Stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: subjects,
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start})
	if err != nil {
		return fmt.Errorf("scan %v: %w", subjects, err)
	}
	for ctx.Err() == nil {
		batch, err := c.FetchNoWait(500)
		if err != nil {
			return fmt.Errorf("scan %v: %w", subjects, err)
		}
		got, last := 0, false
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			fn(m, md.Sequence.Stream)
			last = md.NumPending == 0
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("scan %v: %w", subjects, err)
		}
		if got == 0 || last {
			return nil
		}
	}
	return ctx.Err()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// freshAge: an invocation consumed within this of being stored has its
// Record as the ingress created it (or cancelled, which the dispatch
// compare-and-set finds), so it is queued without reading the Record.
const freshAge = 2 * time.Second

// onInvocation takes a new invocation from invoke.<pool>.
func (a *Activator) onInvocation(m jetstream.Msg) {
	var inv messages.Invocation
	if err := json.Unmarshal(m.Data(), &inv); err != nil || inv.InvocationID == "" || inv.Pool == "" {
		a.cfg.Logger.Warn("dropping malformed invocation", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return
	}
	md, err := m.Metadata()
	if err != nil {
		_ = m.Nak()
		return
	}
	a.mu.Lock()
	_, known := a.items[inv.InvocationID]
	if p := a.poolLocked(inv.Pool); md.Sequence.Stream > p.invokeSeq {
		p.invokeSeq = md.Sequence.Stream
	}
	a.mu.Unlock()
	if known {
		_ = m.Ack()
		return
	}
	st := a.cfg.Store
	it := &item{inv: inv, seq: md.Sequence.Stream, queued: true}
	rev, _ := strconv.ParseUint(m.Headers().Get(stream.RevisionHeader), 10, 64)
	if rev != 0 && md.NumDelivered == 1 && time.Since(md.Timestamp) < freshAge {
		it.rec = stream.Cached{Rev: rev, Record: messages.Record{InvocationID: inv.InvocationID, Pool: inv.Pool, Mode: inv.Mode,
			State: messages.StateQueued, Stream: st.Config.Stream, AcceptedAt: inv.AcceptedAt, UpdatedAt: inv.AcceptedAt}}
	} else {
		// Stored a while ago (the activator was away): it may have been
		// cancelled or timed out since.
		rec, rev, err := st.Get(a.ctx, inv.InvocationID)
		switch {
		case errors.Is(err, stream.ErrNotFound):
			// The Record expired or was removed after a failed publish
			// response; the message is authoritative and the dispatch
			// creates the Record.
		case err != nil:
			_ = m.NakWithDelay(time.Second)
			return
		case rec.State != messages.StateQueued:
			// Finished, or dispatched by this leader (then it is known) or
			// by the one before (then rebuild loaded it): nothing to do.
			_ = m.Ack()
			return
		default:
			it.rec = stream.Cached{Record: rec, Rev: rev}
			it.attempt = rec.Attempt
		}
	}
	a.mu.Lock()
	if _, known := a.items[inv.InvocationID]; !known {
		a.items[inv.InvocationID] = it
		p := a.poolLocked(inv.Pool)
		p.queue = append(p.queue, it)
		a.metrics.accepted.WithLabelValues(inv.Pool).Inc()
	}
	a.mu.Unlock()
	_ = m.Ack()
	a.poke()
}

// dispatchable reports whether w may take one more invocation now.
func (w *worker) dispatchable(now time.Time) bool {
	return w.registered && w.ready && !w.draining && now.After(w.drainUntil) &&
		(w.pod == nil || !w.pod.terminating) && len(w.inflight) < w.concurrency
}

// dispatchAll assigns queued invocations to workers, pool by pool; the
// network work happens in goroutines so no pool or invocation waits on
// another.
func (a *Activator) dispatchAll() {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.pools {
		if len(p.queue) == 0 {
			continue
		}
		var ws []*worker
		for _, w := range p.workers {
			if w.dispatchable(now) {
				ws = append(ws, w)
			}
		}
		if len(ws) == 0 {
			continue
		}
		rest := p.queue[:0]
		for i, it := range p.queue {
			if it.notBefore.After(now) {
				rest = append(rest, it)
				continue
			}
			w := leastLoaded(ws, now)
			if w == nil {
				rest = append(rest, p.queue[i:]...)
				break
			}
			it.queued = false
			it.attempt++
			it.started = false
			it.worker = w.name
			it.dispatchedAt = now
			w.inflight[it.inv.InvocationID] = it
			w.idleSince = time.Time{}
			a.wg.Add(1)
			go a.dispatch(it, w.name, w.namespace, it.attempt)
		}
		p.queue = rest
	}
}

// leastLoaded picks the dispatchable worker with the lowest load ratio
// (ties: fewer in flight, then name, for determinism).
func leastLoaded(ws []*worker, now time.Time) *worker {
	var best *worker
	for _, w := range ws {
		if !w.dispatchable(now) {
			continue
		}
		if best == nil {
			best = w
			continue
		}
		l, b := len(w.inflight)*best.concurrency, len(best.inflight)*w.concurrency
		if l < b || (l == b && (len(w.inflight) < len(best.inflight) || (len(w.inflight) == len(best.inflight) && w.name < best.name))) {
			best = w
		}
	}
	return best
}

func (a *Activator) dispatch(it *item, workerName, namespace string, attempt int) {
	defer a.wg.Done()
	ctx, st := a.ctx, a.cfg.Store
	id := it.inv.InvocationID
	// The Record is the source of truth: a Dispatch is published only after
	// the compare-and-set that makes this attempt the current one.
	ok, err := a.write(it, func(c *stream.Cached) (bool, error) {
		ok, err := st.TransitionCached(ctx, id, c, messages.StateDispatched, workerName, attempt, func(r *messages.Record) {
			if r.Sequence == 0 {
				r.Stream, r.Sequence = st.Config.Stream, it.seq
			}
		})
		if !errors.Is(err, stream.ErrNotFound) {
			return ok, err
		}
		// The Record expired or was removed after a publish that did not
		// answer; the message is authoritative.
		now := time.Now().UTC()
		r := messages.Record{InvocationID: id, Pool: it.inv.Pool, Mode: it.inv.Mode, State: messages.StateDispatched, Worker: workerName,
			Attempt: attempt, Stream: st.Config.Stream, Sequence: it.seq, AcceptedAt: it.inv.AcceptedAt, UpdatedAt: now}
		rev, err := st.Create(ctx, r)
		if errors.Is(err, stream.ErrExists) {
			// Created meanwhile: apply the transition to it.
			*c = stream.Cached{}
			return st.TransitionCached(ctx, id, c, messages.StateDispatched, workerName, attempt, nil)
		}
		if err != nil {
			return false, err
		}
		*c = stream.Cached{Record: r, Rev: rev}
		return true, nil
	})
	if err != nil {
		a.cfg.Logger.Warn("dispatch: record update failed; requeue", "invocation", id, "err", err)
		a.requeue(it, workerName, time.Second)
		return
	}
	if !ok {
		// Cancelled, finished elsewhere or superseded: forget it.
		a.forget(it, workerName)
		return
	}
	seq, err := a.publishDispatch(it, workerName, attempt)
	if err != nil {
		a.cfg.Logger.Warn("dispatch: publish failed; requeue", "invocation", id, "err", err)
		a.requeue(it, workerName, time.Second)
		return
	}
	a.mu.Lock()
	if it.attempt == attempt {
		it.dispatchSeq = seq
	}
	a.mu.Unlock()
	a.metrics.dispatched.WithLabelValues(it.inv.Pool).Inc()
	_ = namespace
}

// write runs one Record write of it, serialised with its other writes.
func (a *Activator) write(it *item, fn func(c *stream.Cached) (bool, error)) (bool, error) {
	it.wmu.Lock()
	defer it.wmu.Unlock()
	return fn(&it.rec)
}

// publishDispatch publishes attempt of it to workerName, retrying under the
// same Nats-Msg-Id (the stream drops a copy within the duplicate window).
func (a *Activator) publishDispatch(it *item, workerName string, attempt int) (uint64, error) {
	st := a.cfg.Store
	d := messages.Dispatch{Invocation: it.inv, Worker: workerName, Attempt: attempt, DispatchedAt: time.Now().UTC()}
	b, err := json.Marshal(d)
	if err != nil {
		return 0, fmt.Errorf("encode dispatch: %w", err)
	}
	msgID := messages.DispatchPublishID(it.inv.InvocationID, attempt)
	for i := 0; ; i++ {
		msg := &nats.Msg{Subject: st.Subjects.Dispatch(it.inv.Pool, workerName), Data: b, Header: nats.Header{}}
		pa, err := st.JS.PublishMsg(a.ctx, msg, jetstream.WithMsgID(msgID))
		if err == nil {
			return pa.Sequence, nil
		}
		if i == 2 {
			return 0, fmt.Errorf("publish dispatch %s: %w", msgID, err)
		}
		select {
		case <-a.ctx.Done():
			return 0, fmt.Errorf("publish dispatch %s: %w", msgID, errors.Join(err, a.ctx.Err()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// republish publishes a recorded attempt whose Dispatch rebuild did not
// find in the stream.
func (a *Activator) republish(it *item, workerName string, attempt int) {
	defer a.wg.Done()
	seq, err := a.publishDispatch(it, workerName, attempt)
	if err != nil {
		a.cfg.Logger.Warn("rebuild: republish dispatch failed", "invocation", it.inv.InvocationID, "err", err)
		return
	}
	a.mu.Lock()
	if it.attempt == attempt {
		it.dispatchSeq = seq
	}
	a.mu.Unlock()
}

// requeue takes it off workerName and puts it back at the head of its
// pool's queue after delay.
func (a *Activator) requeue(it *item, workerName string, delay time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.poolLocked(it.inv.Pool)
	if w := p.workers[workerName]; w != nil {
		delete(w.inflight, it.inv.InvocationID)
		if len(w.inflight) == 0 {
			w.idleSince = time.Now()
		}
	}
	if a.items[it.inv.InvocationID] != it || it.queued {
		return
	}
	it.worker = ""
	it.queued = true
	it.notBefore = time.Now().Add(delay)
	p.queue = append([]*item{it}, p.queue...)
}

// forget drops an invocation that needs no more work.
func (a *Activator) forget(it *item, workerName string) {
	it.done.Store(true)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.items[it.inv.InvocationID] != it {
		return
	}
	a.forgetLocked(it.inv.InvocationID, it.inv.Pool, workerName)
	a.poke()
}

func (a *Activator) forgetLocked(id, poolName, workerName string) {
	p := a.poolLocked(poolName)
	it := a.items[id]
	delete(a.items, id)
	for _, w := range p.workers {
		if _, ok := w.inflight[id]; ok && (workerName == "" || w.name == workerName || it == nil || w.name == it.worker) {
			delete(w.inflight, id)
			if len(w.inflight) == 0 {
				w.idleSince = time.Now()
			}
		}
	}
	if it != nil && it.queued {
		q := p.queue[:0]
		for _, x := range p.queue {
			if x != it {
				q = append(q, x)
			}
		}
		p.queue = q
	}
}

// onResult records a worker's result and frees its slot. The in-memory
// state changes at once, in stream order (so a lost worker's invocations
// can wait for the results it published before it went); the Record write
// runs concurrently and the result is acked after it.
func (a *Activator) onResult(m jetstream.Msg) {
	var res messages.Result
	if err := json.Unmarshal(m.Data(), &res); err != nil || res.InvocationID == "" {
		_ = m.Term()
		return
	}
	state := res.State
	if !state.Terminal() {
		state = messages.StateFailed
		if res.Error == "" {
			res.Error = fmt.Sprintf("worker reported non-terminal state %q as result", res.State)
		}
	}
	a.mu.Lock()
	if md, err := m.Metadata(); err == nil && md.Sequence.Stream > a.resultSeq {
		a.resultSeq = md.Sequence.Stream
	}
	it := a.items[res.InvocationID]
	var other *item
	if it != nil {
		it.done.Store(true)
		if it.worker != "" && it.worker != res.Worker {
			other = it // a newer attempt runs elsewhere: cancel it
		}
	}
	p := a.poolLocked(res.Pool)
	if w := p.workers[res.Worker]; w != nil {
		w.lastSeen = time.Now()
		delete(w.inflight, res.InvocationID)
		if len(w.inflight) == 0 {
			w.idleSince = time.Now()
		}
	}
	a.forgetLocked(res.InvocationID, res.Pool, "")
	var otherWorker string
	var otherAttempt int
	if other != nil {
		otherWorker, otherAttempt = other.worker, other.attempt
	}
	a.mu.Unlock()
	if other != nil {
		a.sendCancel(other.inv.Pool, otherWorker, other.inv.InvocationID, otherAttempt)
	}
	a.poke()

	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		record := func(r *messages.Record) { r.Response, r.Error = res.Response, res.Error }
		var ok bool
		var err error
		if it != nil {
			ok, err = a.write(it, func(c *stream.Cached) (bool, error) {
				return a.cfg.Store.TransitionCached(a.ctx, res.InvocationID, c, state, res.Worker, res.Attempt, record)
			})
		} else {
			_, ok, err = a.cfg.Store.Transition(a.ctx, res.InvocationID, state, res.Worker, res.Attempt, record)
		}
		if err != nil && !errors.Is(err, stream.ErrNotFound) {
			// Redelivered; the item is forgotten, so it takes the path above
			// without a known Record.
			_ = m.NakWithDelay(500 * time.Millisecond)
			return
		}
		_ = m.Ack()
		if ok {
			a.metrics.finished.WithLabelValues(res.Pool, string(state)).Inc()
		}
	}()
}

func (a *Activator) sendCancel(poolName, workerName, id string, attempt int) {
	b, _ := json.Marshal(messages.Cancel{InvocationID: id, Attempt: attempt})
	_ = a.cfg.NC.Publish(a.cfg.Store.Subjects.Cancel(poolName, workerName), b)
}

// onEvent tracks workers from sidecar Events.
func (a *Activator) onEvent(m *nats.Msg) {
	var ev messages.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Worker == "" || ev.Pool == "" {
		return
	}
	now := time.Now()
	a.mu.Lock()
	p := a.poolLocked(ev.Pool)
	w := p.workers[ev.Worker]
	if ev.Type == messages.EventDeregistered {
		if w != nil {
			// inFlight 0: the worker finished all it started (its results
			// are in the stream before this event); what it still holds
			// here it never started.
			a.loseLocked(p, w, "deregistered", ev.InFlight == 0)
		}
		a.mu.Unlock()
		a.poke()
		return
	}
	if w == nil {
		w = &worker{name: ev.Worker, pool: ev.Pool, concurrency: 1, inflight: map[string]*item{}, idleSince: now}
		p.workers[ev.Worker] = w
	}
	wasReady := w.registered && w.ready
	w.registered = true
	w.lastSeen = now
	w.namespace = ev.Namespace
	if ev.Concurrency > 0 {
		w.concurrency = ev.Concurrency
	}
	switch ev.Type {
	case messages.EventRegistered, messages.EventHeartbeat:
		w.ready = ev.Ready
		w.draining = ev.Draining
		if w.idleSince.IsZero() && len(w.inflight) == 0 {
			w.idleSince = now
		}
	}
	nowReady := w.registered && w.ready
	// A started event of an invocation not tracked (any more) changes
	// nothing: its result is in, or it belongs to an older attempt.
	var it *item
	if ev.Type == messages.EventStarted && ev.InvocationID != "" {
		if x := a.items[ev.InvocationID]; x != nil && x.attempt == ev.Attempt && x.worker == ev.Worker {
			x.started = true
			it = x
		}
	}
	a.mu.Unlock()
	if it != nil {
		a.wg.Add(1)
		if a.cfg.RunningDelay > 0 {
			time.AfterFunc(a.cfg.RunningDelay, func() { a.markRunning(it, ev) })
		} else {
			go a.markRunning(it, ev)
		}
	}
	if nowReady && !wasReady {
		a.poke()
	}
}

// markRunning records that a worker started an invocation, unless its
// result is already in: running would add nothing then.
func (a *Activator) markRunning(it *item, ev messages.Event) {
	defer a.wg.Done()
	st := a.cfg.Store
	_, _ = a.write(it, func(c *stream.Cached) (bool, error) {
		if it.done.Load() {
			return false, nil
		}
		return st.TransitionCached(a.ctx, ev.InvocationID, c, messages.StateRunning, ev.Worker, ev.Attempt, nil)
	})
}

// loseLocked removes a worker and has its invocations settled: redelivered
// (or dead-lettered) unless they turn out to have finished. clean means
// the worker said it had nothing in flight.
func (a *Activator) loseLocked(p *poolState, w *worker, why string, clean bool) {
	delete(p.workers, w.name)
	ids := make([]string, 0, len(w.inflight))
	for id, it := range w.inflight {
		if a.items[id] == it && it.worker == w.name {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	items := make([]*item, 0, len(ids))
	for _, id := range ids {
		it := w.inflight[id]
		it.worker = "" // neither queued nor on a worker while it settles
		items = append(items, it)
	}
	if len(ids) > 0 || w.registered {
		a.cfg.Logger.Info("worker lost", "pool", p.name, "worker", w.name, "reason", why, "invocations", len(ids), "clean", clean)
	}
	if len(items) > 0 {
		a.wg.Add(1)
		go a.settle(p.name, w.name, why, items, clean)
	}
}

// settle decides what becomes of a lost worker's invocations. A worker
// publishes its results to the stream before it deregisters (or dies), and
// the results consumer may still be behind: settle first waits until it has
// delivered everything stored on result.<pool>, so a finished invocation
// is never run again. What is still open then is checked against its
// Record (a result handled by a previous leader, a cancel, a timeout) and
// only then redelivered: at the head of the queue, with backoff unless the
// worker never started it, and dead-lettered after MaxAttempts strikes.
func (a *Activator) settle(poolName, workerName, why string, items []*item, clean bool) {
	defer a.wg.Done()
	ctx, st := a.ctx, a.cfg.Store
	a.waitResults(ctx, poolName)
	for _, it := range items {
		id := it.inv.InvocationID
		a.mu.Lock()
		live := a.items[id] == it && !it.done.Load() && !it.queued && it.worker == ""
		started := it.started
		a.mu.Unlock()
		if !live {
			continue
		}
		rec, _, err := st.Get(ctx, id)
		if errors.Is(err, stream.ErrNotFound) || (err == nil && (rec.State.Terminal() || rec.Attempt > it.attempt)) {
			a.forget(it, "")
			continue
		}
		if err != nil {
			// The dispatch compare-and-set still guards a redelivery.
			a.cfg.Logger.Warn("settle: read record", "invocation", id, "err", err)
		}
		// Only a clean deregistration shows that the worker never ran it
		// (a started event may be lost); one it did start, clean or not,
		// ran without a result.
		strike := !clean || started || (err == nil && rec.State == messages.StateRunning && rec.Worker == workerName)
		now := time.Now()
		a.mu.Lock()
		if a.items[id] != it || it.done.Load() || it.queued || it.worker != "" {
			a.mu.Unlock()
			continue
		}
		p := a.poolLocked(poolName)
		a.metrics.lost.WithLabelValues(poolName).Inc()
		if strike {
			it.strikes++
		}
		if it.strikes >= a.cfg.MaxAttempts {
			delete(a.items, id)
			it.done.Store(true)
			a.wg.Add(1)
			go a.deadLetter(it, fmt.Sprintf("worker %s lost (%s) on attempt %d; %d of %d allowed losses", workerName, why, it.attempt, it.strikes, a.cfg.MaxAttempts))
			a.mu.Unlock()
			continue
		}
		it.queued = true
		it.started = false
		it.notBefore = now
		if strike {
			it.notBefore = now.Add(a.backoff(it.strikes))
		}
		p.queue = append([]*item{it}, p.queue...)
		a.metrics.redelivered.WithLabelValues(poolName).Inc()
		stale := it.dispatchSeq
		it.dispatchSeq = 0
		a.mu.Unlock()
		if stale != 0 {
			// The abandoned attempt must not run later (a restarted worker
			// of the same name resumes its consumer): remove its Dispatch.
			if err := st.Stream.DeleteMsg(ctx, stale); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				a.cfg.Logger.Debug("settle: delete abandoned dispatch", "invocation", id, "seq", stale, "err", err)
			}
		}
	}
	a.poke()
}

// waitResults returns once the results consumer has delivered every result
// stored on result.<pool> so far, or when it has made no progress for
// ResultAckWait and a bit (a result delivered to a previous leader comes
// back only after it).
func (a *Activator) waitResults(ctx context.Context, poolName string) {
	st := a.cfg.Store
	m, err := st.Stream.GetLastMsgForSubject(ctx, st.Subjects.Result(poolName))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return
	}
	if err != nil {
		a.cfg.Logger.Warn("settle: last result", "pool", poolName, "err", err)
		return
	}
	patience := a.cfg.ResultAckWait + time.Second
	deadline := time.Now().Add(patience)
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	var last uint64
	for {
		a.mu.Lock()
		seen := a.resultSeq
		a.mu.Unlock()
		if seen >= m.Sequence {
			return
		}
		if seen != last {
			last, deadline = seen, time.Now().Add(patience)
		}
		if time.Now().After(deadline) {
			a.cfg.Logger.Warn("settle: results consumer behind; deciding on the Records", "pool", poolName, "seen", seen, "last", m.Sequence)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (a *Activator) backoff(attempt int) time.Duration {
	d := a.cfg.Backoff
	for i := 1; i < attempt && d < a.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, a.cfg.MaxBackoff)
}

func (a *Activator) deadLetter(it *item, reason string) {
	defer a.wg.Done()
	ctx, st := a.ctx, a.cfg.Store
	b, _ := json.Marshal(it.inv)
	msg := &nats.Msg{Subject: st.Subjects.DeadLetter(it.inv.Pool), Data: b, Header: nats.Header{}}
	msg.Header.Set("Runplane-Reason", reason)
	for {
		_, err := st.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(it.inv.InvocationID+".deadletter"))
		if err == nil {
			break
		}
		select {
		case <-ctx.Done(): // shutting down: the next leader dead-letters it
			return
		case <-time.After(time.Second):
		}
	}
	_, err := a.write(it, func(c *stream.Cached) (bool, error) {
		return st.TransitionCached(ctx, it.inv.InvocationID, c, messages.StateDeadLettered, "", 0, func(r *messages.Record) { r.Error = reason })
	})
	if err != nil {
		a.cfg.Logger.Warn("dead-letter record update failed", "invocation", it.inv.InvocationID, "err", err)
	}
	a.metrics.deadLettered.WithLabelValues(it.inv.Pool).Inc()
}

// expire finishes an invocation on the activator's own authority (TTL in
// queue or execution timeout).
func (a *Activator) expire(it *item, state messages.State, reason string) {
	defer a.wg.Done()
	it.done.Store(true)
	_, err := a.write(it, func(c *stream.Cached) (bool, error) {
		return a.cfg.Store.TransitionCached(a.ctx, it.inv.InvocationID, c, state, "", 0, func(r *messages.Record) { r.Error = reason })
	})
	if err != nil {
		a.cfg.Logger.Warn("expire: record update failed", "invocation", it.inv.InvocationID, "err", err)
	}
}

// housekeep runs the periodic checks: lost workers, TTLs, execution
// timeouts, scaling and status.
func (a *Activator) housekeep(ctx context.Context) {
	now := time.Now()
	a.mu.Lock()
	for _, p := range a.pools {
		for _, w := range p.workers {
			silent := now.Sub(w.lastSeen) > a.cfg.HeartbeatTimeout
			if silent && (w.registered || len(w.inflight) > 0) {
				a.loseLocked(p, w, "heartbeats stopped", false)
			}
		}
		// Time allowed in the queue.
		q := p.queue[:0]
		for _, it := range p.queue {
			if it.inv.TTLSeconds > 0 && now.After(it.inv.AcceptedAt.Add(time.Duration(it.inv.TTLSeconds)*time.Second)) {
				delete(a.items, it.inv.InvocationID)
				a.wg.Add(1)
				go a.expire(it, messages.StateTimedOut, fmt.Sprintf("not dispatched within ttlSeconds=%d", it.inv.TTLSeconds))
				continue
			}
			q = append(q, it)
		}
		p.queue = q
		// Execution time.
		for _, w := range p.workers {
			for id, it := range w.inflight {
				if it.inv.TimeoutSeconds <= 0 || it.dispatchedAt.IsZero() {
					continue
				}
				if now.After(it.dispatchedAt.Add(time.Duration(it.inv.TimeoutSeconds)*time.Second + a.cfg.ExecutionGrace)) {
					delete(w.inflight, id)
					delete(a.items, id)
					a.wg.Add(1)
					go a.expire(it, messages.StateTimedOut, fmt.Sprintf("no result within timeoutSeconds=%d", it.inv.TimeoutSeconds))
					go a.sendCancel(p.name, w.name, id, it.attempt)
				}
			}
		}
	}
	a.mu.Unlock()
	if a.scaler != nil {
		a.scaleAll(ctx, now)
	}
	a.publishStatus(ctx, now)
}

// statusLocked summarises a pool.
func (a *Activator) statusLocked(p *poolState, now time.Time) stream.PoolStatus {
	s := stream.PoolStatus{Pool: p.name, Backlog: len(p.queue), InvokeSeq: p.invokeSeq, Workers: []stream.WorkerStatus{}}
	if pl, ok := a.cfg.Pools.Lookup(p.name); ok {
		s.Replicas = pl.Replicas
	}
	names := make([]string, 0, len(p.workers))
	for n := range p.workers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		w := p.workers[n]
		s.InFlight += len(w.inflight)
		ready := w.registered && w.ready
		if ready && !w.draining {
			s.Capacity += w.concurrency
		}
		s.Workers = append(s.Workers, stream.WorkerStatus{Name: n, Ready: ready, Draining: w.draining || now.Before(w.drainUntil),
			Starting: !ready, Concurrency: w.concurrency, InFlight: len(w.inflight)})
	}
	return s
}

func (a *Activator) publishStatus(ctx context.Context, now time.Time) {
	type put struct {
		key string
		b   []byte
	}
	var puts []put
	a.mu.Lock()
	names := map[string]bool{}
	for _, pl := range a.cfg.Pools.List() {
		names[pl.Name] = true
	}
	for n := range a.pools {
		names[n] = true
	}
	for n := range names {
		p := a.poolLocked(n)
		s := a.statusLocked(p, now)
		b, _ := json.Marshal(s)
		a.metrics.backlog.WithLabelValues(n).Set(float64(s.Backlog))
		a.metrics.inflight.WithLabelValues(n).Set(float64(s.InFlight))
		if string(b) == string(p.lastStatus) && now.Sub(p.statusAt) < 5*time.Second {
			continue
		}
		s.UpdatedAt = now.UTC()
		full, _ := json.Marshal(s)
		p.lastStatus, p.statusAt = b, now
		puts = append(puts, put{n, full})
	}
	a.mu.Unlock()
	for _, p := range puts {
		if _, err := a.cfg.Store.Pools.Put(ctx, p.key, p.b); err != nil {
			a.cfg.Logger.Debug("publish pool status", "pool", p.key, "err", err)
		}
	}
}
