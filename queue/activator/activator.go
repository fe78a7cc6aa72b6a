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
	"sort"
	"sync"
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
	kick  chan struct{}
	ctx   context.Context
	wg    sync.WaitGroup
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
	results, err := a.consume(ctx, "results", st.Subjects.Result("*"), a.onResult)
	if err != nil {
		return err
	}
	defer results.Stop()
	invokes, err := a.consume(ctx, "invoke", st.Subjects.Invoke("*"), a.onInvocation)
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

func (a *Activator) consume(ctx context.Context, name, subject string, h jetstream.MessageHandler) (jetstream.ConsumeContext, error) {
	st := a.cfg.Store
	c, err := st.JS.CreateOrUpdateConsumer(ctx, st.Config.Stream, jetstream.ConsumerConfig{
		Durable:       a.cfg.ConsumerPrefix + "-" + name,
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 20000,
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer %s-%s: %w", a.cfg.ConsumerPrefix, name, err)
	}
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
	var open []messages.Record
	for e := range w.Updates() {
		if e == nil {
			break
		}
		r, err := stream.Decode(e.Value())
		if err != nil || r.State.Terminal() || r.Sequence == 0 {
			continue // Sequence 0: not yet consumed; the invoke consumer will deliver it
		}
		open = append(open, r)
	}
	n := 0
	for _, r := range open {
		m, err := st.Stream.GetMsg(ctx, r.Sequence)
		if err != nil {
			a.cfg.Logger.Warn("rebuild: invocation missing from stream", "invocation", r.InvocationID, "seq", r.Sequence, "err", err)
			continue
		}
		var inv messages.Invocation
		if err := json.Unmarshal(m.Data, &inv); err != nil {
			continue
		}
		a.mu.Lock()
		it := &item{inv: inv, seq: r.Sequence, attempt: r.Attempt}
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
			wk.inflight[inv.InvocationID] = it
			if r.State == messages.StateDispatched {
				// The old leader may have died between the Record and the
				// publish: publish again (same Nats-Msg-Id, so at most one
				// copy reaches the worker within the duplicate window).
				a.wg.Add(1)
				go a.republish(it, r.Worker, r.Attempt)
			}
		} else {
			it.queued = true
			p.queue = append(p.queue, it)
		}
		a.mu.Unlock()
		n++
	}
	a.cfg.Logger.Info("activator rebuilt state", "invocations", n)
	return nil
}

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
	a.mu.Unlock()
	if known {
		_ = m.Ack()
		return
	}
	ctx := a.ctx
	seq := md.Sequence.Stream
	rec, _, err := a.cfg.Store.Get(ctx, inv.InvocationID)
	switch {
	case errors.Is(err, stream.ErrNotFound):
		// The Record expired or was removed after a failed publish
		// response; the message is authoritative.
		_, err = a.cfg.Store.Create(ctx, messages.Record{InvocationID: inv.InvocationID, Pool: inv.Pool, Mode: inv.Mode,
			State: messages.StateQueued, Stream: a.cfg.Store.Config.Stream, Sequence: seq, AcceptedAt: inv.AcceptedAt, UpdatedAt: time.Now().UTC()})
		if err != nil && !errors.Is(err, stream.ErrExists) {
			_ = m.NakWithDelay(time.Second)
			return
		}
	case err != nil:
		_ = m.NakWithDelay(time.Second)
		return
	case rec.State.Terminal():
		_ = m.Ack()
		return
	case rec.Sequence == 0:
		// Make the Record point at its message so a restart can reload it.
		if _, _, err := a.cfg.Store.Update(ctx, inv.InvocationID, func(r *messages.Record) bool {
			if r.Sequence != 0 {
				return false
			}
			r.Stream, r.Sequence = a.cfg.Store.Config.Stream, seq
			return true
		}); err != nil {
			_ = m.NakWithDelay(time.Second)
			return
		}
	}
	a.mu.Lock()
	if _, known := a.items[inv.InvocationID]; !known {
		it := &item{inv: inv, seq: seq, queued: true, attempt: rec.Attempt}
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
	rec, ok, err := st.Transition(ctx, id, messages.StateDispatched, workerName, attempt, func(r *messages.Record) {
		if r.Sequence == 0 {
			r.Stream, r.Sequence = st.Config.Stream, it.seq
		}
	})
	if err != nil && !errors.Is(err, stream.ErrNotFound) {
		a.cfg.Logger.Warn("dispatch: record update failed; requeue", "invocation", id, "err", err)
		a.requeue(it, workerName, time.Second, false)
		return
	}
	if err != nil || !ok {
		// Cancelled, finished elsewhere or expired: forget it.
		a.forget(it, workerName)
		_ = rec
		return
	}
	d := messages.Dispatch{Invocation: it.inv, Worker: workerName, Attempt: attempt, DispatchedAt: time.Now().UTC()}
	b, _ := json.Marshal(d)
	msg := &nats.Msg{Subject: st.Subjects.Dispatch(it.inv.Pool, workerName), Data: b, Header: nats.Header{}}
	if _, err := st.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(messages.DispatchPublishID(id, attempt))); err != nil {
		a.cfg.Logger.Warn("dispatch: publish failed; requeue", "invocation", id, "err", err)
		a.requeue(it, workerName, time.Second, false)
		return
	}
	a.metrics.dispatched.WithLabelValues(it.inv.Pool).Inc()
	_ = namespace
}

func (a *Activator) republish(it *item, workerName string, attempt int) {
	defer a.wg.Done()
	st := a.cfg.Store
	d := messages.Dispatch{Invocation: it.inv, Worker: workerName, Attempt: attempt, DispatchedAt: time.Now().UTC()}
	b, _ := json.Marshal(d)
	msg := &nats.Msg{Subject: st.Subjects.Dispatch(it.inv.Pool, workerName), Data: b, Header: nats.Header{}}
	if _, err := st.JS.PublishMsg(a.ctx, msg, jetstream.WithMsgID(messages.DispatchPublishID(it.inv.InvocationID, attempt))); err != nil {
		a.cfg.Logger.Warn("rebuild: republish dispatch failed", "invocation", it.inv.InvocationID, "err", err)
	}
}

// requeue takes it off workerName and puts it back at the head of its
// pool's queue after delay.
func (a *Activator) requeue(it *item, workerName string, delay time.Duration, _ bool) {
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
	a.mu.Lock()
	defer a.mu.Unlock()
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

// onResult records a worker's result and frees its slot.
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
	_, ok, err := a.cfg.Store.Transition(a.ctx, res.InvocationID, state, res.Worker, res.Attempt, func(r *messages.Record) {
		r.Response = res.Response
		r.Error = res.Error
	})
	if err != nil && !errors.Is(err, stream.ErrNotFound) {
		_ = m.NakWithDelay(500 * time.Millisecond)
		return
	}
	_ = m.Ack()
	if ok {
		a.metrics.finished.WithLabelValues(res.Pool, string(state)).Inc()
	}
	a.mu.Lock()
	it := a.items[res.InvocationID]
	var other *item
	if it != nil && it.worker != "" && it.worker != res.Worker {
		other = it // a newer attempt runs elsewhere: cancel it
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
	a.mu.Unlock()
	if other != nil {
		a.sendCancel(other.inv.Pool, other.worker, other.inv.InvocationID, other.attempt)
	}
	a.poke()
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
			a.loseLocked(p, w, "deregistered")
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
	a.mu.Unlock()
	if ev.Type == messages.EventStarted && ev.InvocationID != "" {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			_, _, _ = a.cfg.Store.Transition(a.ctx, ev.InvocationID, messages.StateRunning, ev.Worker, ev.Attempt, nil)
		}()
	}
	if nowReady && !wasReady {
		a.poke()
	}
}

// loseLocked removes a worker and redelivers (or dead-letters) its work.
func (a *Activator) loseLocked(p *poolState, w *worker, why string) {
	delete(p.workers, w.name)
	ids := make([]string, 0, len(w.inflight))
	for id := range w.inflight {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	now := time.Now()
	var front []*item
	for _, id := range ids {
		it := w.inflight[id]
		if a.items[id] != it {
			continue
		}
		a.metrics.lost.WithLabelValues(p.name).Inc()
		if it.attempt >= a.cfg.MaxAttempts {
			delete(a.items, id)
			a.wg.Add(1)
			go a.deadLetter(it, fmt.Sprintf("worker %s lost (%s) on attempt %d of %d", w.name, why, it.attempt, a.cfg.MaxAttempts))
			continue
		}
		it.worker = ""
		it.queued = true
		it.notBefore = now.Add(a.backoff(it.attempt))
		front = append(front, it)
		a.metrics.redelivered.WithLabelValues(p.name).Inc()
	}
	p.queue = append(front, p.queue...)
	if len(ids) > 0 || w.registered {
		a.cfg.Logger.Info("worker lost", "pool", p.name, "worker", w.name, "reason", why, "invocations", len(ids))
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
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	_, _, err := st.Transition(ctx, it.inv.InvocationID, messages.StateDeadLettered, "", 0, func(r *messages.Record) { r.Error = reason })
	if err != nil {
		a.cfg.Logger.Warn("dead-letter record update failed", "invocation", it.inv.InvocationID, "err", err)
	}
	a.metrics.deadLettered.WithLabelValues(it.inv.Pool).Inc()
}

// expire finishes an invocation on the activator's own authority (TTL in
// queue or execution timeout).
func (a *Activator) expire(it *item, state messages.State, reason string) {
	defer a.wg.Done()
	_, _, err := a.cfg.Store.Transition(a.ctx, it.inv.InvocationID, state, "", 0, func(r *messages.Record) { r.Error = reason })
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
				a.loseLocked(p, w, "heartbeats stopped")
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
	s := stream.PoolStatus{Pool: p.name, Backlog: len(p.queue), Workers: []stream.WorkerStatus{}}
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
