// Package sidecar is the worker sidecar of a serverless Pod: it alone holds
// the NATS credentials, consumes the worker's dispatch subject from
// JetStream with a durable consumer, calls the user's framework over the
// unix socket (package framework) and publishes results, sync replies and
// worker events (internal/messages). It serves /livez and /readyz, and
// /metrics on loopback only (Config.MetricsAddr).
package sidecar

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/objects"
	"github.com/runplane/runplane/internal/tracing"
	"github.com/runplane/runplane/sidecar/frameworkclient"
)

// Causes of an invocation's context ending, mapped to result states.
var (
	errCancelled = errors.New("invocation cancelled")
	errTimedOut  = errors.New("invocation timed out")
	errShutdown  = errors.New("worker shut down before the invocation finished")
)

// completedCap bounds the memory of answered dispatch IDs.
const completedCap = 10000

// Sidecar is one running worker sidecar. Use Run; New and Start exist so
// tests and local workers can reach Addr before Run returns.
type Sidecar struct {
	cfg      Config
	log      *slog.Logger
	subjects messages.Subjects
	inbox    string // the connection's inbox prefix, within the worker's subjects
	client   *frameworkclient.Client
	metrics  *metrics
	// tracer: the invoke spans (trace.go).
	tracer tracing.Tracer

	ln net.Listener
	// metricsLn serves /metrics, on loopback (nil: none).
	metricsLn net.Listener

	nc       *nats.Conn
	js       jetstream.JetStream
	consumer atomic.Pointer[jetstream.Consumer]
	// obs is the pool's Object Store bucket, once opened (objects.go).
	obs atomic.Pointer[jetstream.ObjectStore]
	// progress is how often a running dispatch gets an in-progress ack
	// (set before the fetcher starts).
	progress time.Duration

	ready atomic.Bool // framework healthy (last probe)
	// idempotent: the framework offers the idempotent invoke (last probe).
	idempotent atomic.Bool
	draining   atomic.Bool
	inFlight   atomic.Int64

	mu        sync.Mutex
	running   map[string]context.CancelCauseFunc // dispatch msg ID → cancel
	completed map[string]struct{}
	order     []completedID // oldest first
	// held maps an invocation ID to what this sidecar ran of it: any
	// attempt, running or finished (as many as completed). A later attempt
	// of it is not run again here (see handle).
	held map[string]*execution
	// outcomes journals the framework's answers until their results are
	// stored; replaying holds the dispatch IDs of those a previous run
	// left, being published, each with a channel closed when that ends
	// (replays counts them).
	outcomes  outcomes
	replaying map[string]chan struct{}
	replays   sync.WaitGroup

	wakeFetch chan struct{} // readiness became true
	reprobe   chan struct{} // readiness became false outside the probe loop
}

// New validates cfg and binds the HTTP listener, so /livez answers as soon
// as the process starts.
func New(cfg Config) (*Sidecar, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on sidecar HTTP address %s: %w", cfg.HTTPAddr, err)
	}
	var metricsLn net.Listener
	if cfg.MetricsAddr != "" {
		// The Pod's loopback is shared with the tenant's containers, which
		// may hold the port: metrics are not worth a worker that cannot start.
		if metricsLn, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			cfg.Logger.Warn("metrics not served", "addr", cfg.MetricsAddr, "err", err)
			metricsLn = nil
		}
	}
	s := &Sidecar{
		cfg:       cfg,
		log:       cfg.Logger.With("pool", cfg.Pool, "worker", cfg.WorkerName),
		subjects:  messages.Subjects{Prefix: cfg.SubjectPrefix},
		inbox:     messages.WorkerInbox(cfg.WorkerNamespace, cfg.Pool, cfg.WorkerName),
		client:    frameworkclient.NewClient(cfg.FrameworkSocket, cfg.InvokePath, cfg.HealthPath),
		metrics:   newMetrics(cfg.Concurrency),
		ln:        ln,
		metricsLn: metricsLn,
		running:   map[string]context.CancelCauseFunc{},
		completed: map[string]struct{}{},
		held:      map[string]*execution{},
		outcomes:  outcomes{dir: cfg.StateDir},
		replaying: map[string]chan struct{}{},
		wakeFetch: make(chan struct{}, 1),
		reprobe:   make(chan struct{}, 1),
	}
	s.tracer = tracing.NewTracer(cfg.TracerProvider, "runplane/sidecar")
	return s, nil
}

// Addr is the address the HTTP endpoints are served on.
func (s *Sidecar) Addr() string { return s.ln.Addr().String() }

// MetricsAddr is the (loopback) address /metrics is served on; "" if none.
func (s *Sidecar) MetricsAddr() string {
	if s.metricsLn == nil {
		return ""
	}
	return s.metricsLn.Addr().String()
}

// Run is New followed by Sidecar.Run.
func Run(ctx context.Context, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// Run serves until ctx ends, then drains: it stops fetching, lets in-flight
// invocations finish within ShutdownGrace, publishes deregistered and
// returns.
func (s *Sidecar) Run(ctx context.Context) error {
	defer s.ln.Close()
	opts, err := s.natsOptions()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(s.cfg.NATSURL, opts...)
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", s.cfg.NATSURL, err)
	}
	defer nc.Close()
	s.nc = nc
	js, err := s.jetStream(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	s.js = js

	// Connect returned at once (it retries in the background), so /livez
	// still answers right away.
	srv := &http.Server{Handler: s.httpHandler(), ReadHeaderTimeout: 5 * time.Second}
	httpErr := make(chan error, 1)
	go func() { httpErr <- srv.Serve(s.ln) }()
	defer srv.Close()
	if s.metricsLn != nil {
		defer s.metricsLn.Close()
		msrv := &http.Server{Handler: s.metricsHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = msrv.Serve(s.metricsLn) }() // ends with Close; metrics are not worth a failed worker
		defer msrv.Close()
	}

	// Background loops live until the drain is over, not until ctx ends.
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()
	var bgWG sync.WaitGroup
	bgWG.Add(1)
	go func() { defer bgWG.Done(); s.probeLoop(bg) }()

	cons, err := s.ensureConsumer(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // told to stop before we ever took work
		}
		return err
	}
	s.consumer.Store(&cons)
	s.progress = s.progressEvery(cons)

	cancelSub, err := nc.Subscribe(s.subjects.Cancel(s.cfg.WorkerNamespace, s.cfg.Pool, s.cfg.WorkerName), s.onCancel)
	if err != nil {
		return fmt.Errorf("subscribe to cancel subject: %w", err)
	}
	defer func() {
		if err := cancelSub.Unsubscribe(); err != nil {
			s.log.Warn("unsubscribe from the cancel subject", "err", err)
		}
	}()

	s.publishEvent(messages.Event{Type: messages.EventRegistered})
	s.log.Info("registered", "concurrency", s.cfg.Concurrency, "stream", s.cfg.StreamName)
	bgWG.Add(1)
	go func() { defer bgWG.Done(); s.heartbeatLoop(bg) }()

	// Invocations run on their own context so SIGTERM does not cut them;
	// it is cancelled only when the grace period is over.
	invCtx, stopInv := context.WithCancelCause(context.Background())
	defer stopInv(errShutdown)
	s.recoverJournal(invCtx)
	done := s.fetchLoop(ctx, invCtx, cons)
	<-ctx.Done()

	// Drain.
	s.draining.Store(true)
	s.log.Info("draining", "inFlight", s.inFlight.Load(), "grace", s.cfg.ShutdownGrace)
	s.publishEvent(messages.Event{Type: messages.EventHeartbeat})
	// While running invocations finish, whatever else reaches this worker
	// goes back to the queue at once.
	handbackDone := make(chan struct{})
	go func() { defer close(handbackDone); s.handBackLoop(done, cons) }()
	allDone := make(chan struct{})
	go func() { <-done; s.replays.Wait(); close(allDone) }()
	select {
	case <-allDone:
	case <-time.After(s.cfg.ShutdownGrace):
		s.log.Warn("grace period over; failing the invocations still running", "inFlight", s.inFlight.Load())
		stopInv(errShutdown)
		<-allDone
	}
	<-handbackDone
	s.publishEvent(messages.Event{Type: messages.EventDeregistered})
	stopBG()
	bgWG.Wait()
	if err := nc.FlushTimeout(shutdownFlushTimeout(nc)); err != nil {
		s.log.Warn("flush NATS on shutdown: the deregistration may be lost (the activator then finds the worker gone by its heartbeats)", "err", err)
	}
	s.log.Info("deregistered")
	select {
	case err := <-httpErr:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("sidecar HTTP server: %w", err)
		}
	default:
	}
	return nil
}

// shutdownFlushTimeout bounds the last flush of a draining sidecar: as
// nats.go's Flush (10s) on a live connection; on one that is reconnecting,
// which holds the deregistration in its buffer until NATS answers, 2s — a
// blip may pass, an outage would only hold the Pod past its drain, and a
// worker that never deregisters is found gone by its missed heartbeats
// (killed workers spent 14.5 of TestWorkerLossRedelivery's 20s here).
func shutdownFlushTimeout(nc *nats.Conn) time.Duration {
	if nc.IsReconnecting() {
		return 2 * time.Second
	}
	return 10 * time.Second
}

// ensureConsumer binds to the worker's durable consumer, retrying while
// NATS, the stream or the consumer is not there yet. Under the auth
// callout the queue creates the consumer when it admits the worker and the
// worker may not create or change consumers: the sidecar only reads its
// info. On a NATS without auth (no token, or CreateConsumer: tests and
// local runs, which isolate nothing anyway) it creates it.
func (s *Sidecar) ensureConsumer(ctx context.Context) (jetstream.Consumer, error) {
	cfg := jetstream.ConsumerConfig{
		Durable:           messages.ConsumerName(s.cfg.WorkerNamespace, s.cfg.Pool, s.cfg.WorkerName),
		Description:       "dispatches of worker " + s.cfg.WorkerNamespace + "/" + s.cfg.WorkerName,
		FilterSubject:     s.subjects.Dispatch(s.cfg.WorkerNamespace, s.cfg.Pool, s.cfg.WorkerName),
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           s.cfg.AckWait,
		MaxAckPending:     s.cfg.Concurrency,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: s.cfg.InactiveThreshold,
		// As the queue's (stream.DefaultWorkerMaxDeliver): bounded, so a
		// dispatch that cannot be run is dead-lettered, not delivered for
		// ever.
		MaxDeliver: 5,
	}
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Cap: 5 * time.Second, Steps: math.MaxInt32}
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var cons jetstream.Consumer
		var err error
		if s.cfg.CreateConsumer || s.cfg.NATSTokenFile == "" {
			cons, err = s.js.CreateOrUpdateConsumer(cctx, s.cfg.StreamName, cfg)
		} else {
			cons, err = s.js.Consumer(cctx, s.cfg.StreamName, cfg.Durable)
		}
		cancel()
		if err == nil {
			return cons, nil
		}
		s.log.Info("waiting for the dispatch consumer", "stream", s.cfg.StreamName, "consumer", cfg.Durable, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bind consumer %s on stream %s: %w", cfg.Durable, s.cfg.StreamName, err)
		case <-time.After(backoff.Step()):
		}
	}
}

// progressEvery is how often a running invocation's dispatch is kept from
// redelivery: a third of the consumer's ack wait (set by whoever created
// the consumer), or of the configured one when the consumer does not say.
func (s *Sidecar) progressEvery(cons jetstream.Consumer) time.Duration {
	wait := s.cfg.AckWait
	if info := cons.CachedInfo(); info != nil && info.Config.AckWait > 0 {
		wait = info.Config.AckWait
	}
	return max(wait/3, 50*time.Millisecond)
}

// unhold forgets ex, an execution of invocation inv that never ran (handed
// back unrun), so a later attempt of inv runs here.
func (s *Sidecar) unhold(inv string, ex *execution) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[inv] == ex {
		delete(s.held, inv)
	}
}

// progressPeriod is how often a kept dispatch gets an in-progress ack:
// progressEvery's, or a third of the configured ack wait before it is known.
func (s *Sidecar) progressPeriod() time.Duration {
	return cmp.Or(s.progress, max(s.cfg.AckWait/3, 50*time.Millisecond))
}

// handle runs one delivered dispatch to the end: framework call, result,
// reply, events, ack.
func (s *Sidecar) handle(invCtx context.Context, msg jetstream.Msg) {
	var d messages.Dispatch
	if err := json.Unmarshal(msg.Data(), &d); err != nil || d.InvocationID == "" {
		// Not a dispatch: it can never succeed, so do not redeliver it.
		s.log.Error("dropping undecodable dispatch", "subject", msg.Subject(), "err", err)
		s.acked(s.log, "term", msg.TermWithReason("undecodable dispatch"))
		return
	}
	id := messages.DispatchMsgID(s.cfg.WorkerNamespace, d.InvocationID, d.Attempt)
	log := s.log.With("invocation", d.InvocationID, "attempt", d.Attempt)

	ctx, cancel := context.WithCancelCause(invCtx)
	defer cancel(nil)
	s.mu.Lock()
	if _, ok := s.completed[id]; ok {
		s.mu.Unlock()
		// Already answered: the result is in the stream; only the ack was lost.
		log.Info("acking duplicate dispatch")
		s.metrics.duplicates.Inc()
		actx, acancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer acancel()
		err := msg.DoubleAck(actx)
		s.acked(log, "ack", err)
		if err == nil {
			s.forget(log, id)
		}
		return
	}
	if _, ok := s.running[id]; ok {
		s.mu.Unlock()
		// A redelivery of what we are running: the running copy acks the
		// same stream sequence when it finishes.
		log.Info("dispatch redelivered while running; keeping the running copy")
		s.metrics.duplicates.Inc()
		s.acked(log, "in_progress", msg.InProgress())
		return
	}
	if replayed, ok := s.replaying[id]; ok {
		s.mu.Unlock()
		// Answered before this sidecar restarted; its stored outcome is
		// being published (replayOutcomes): kept in progress until then,
		// and acked once it is stored.
		log.Info("dispatch of an outcome stored before a restart; publishing that, not running it again")
		s.metrics.duplicates.Inc()
		s.keepUntilReplayed(log, msg, id, replayed)
		return
	}
	if ex, ok := s.held[d.InvocationID]; ok && ex.attempt != d.Attempt && !ex.mayRunAgain(d) {
		s.mu.Unlock()
		// Another attempt of an execution this worker runs or has finished:
		// the activator declared the worker lost while it held it (frozen,
		// cut from NATS) and gave it back. Running it again would run a
		// finished execution twice; the held attempt's result (stored, or
		// stored when it ends) finishes the invocation — the activator
		// takes a superseded attempt's result from the worker it was
		// dispatched to.
		log.Info("dispatch of an invocation this worker already runs or ran; not running it again", "heldAttempt", ex.attempt)
		s.metrics.duplicates.Inc()
		s.acked(log, "ack", msg.Ack())
		return
	}
	if d.TimeoutSeconds > 0 && !d.DispatchedAt.IsZero() && time.Since(d.DispatchedAt) > time.Duration(d.TimeoutSeconds)*time.Second {
		s.mu.Unlock()
		// Past its deadline before it started (this worker was frozen or
		// cut off with it): the activator has given the attempt up, so
		// starting it now could run it beside its redelivery.
		log.Warn("dispatch past its deadline before it started; not running it", "dispatchedAt", d.DispatchedAt, "timeoutSeconds", d.TimeoutSeconds)
		s.acked(log, "term", msg.TermWithReason("past its deadline before it started"))
		return
	}
	ex := &execution{attempt: d.Attempt}
	s.running[id] = cancel
	s.held[d.InvocationID] = ex
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.running, id)
		s.mu.Unlock()
	}()

	s.inFlight.Add(1)
	s.metrics.inFlight.Inc()
	defer func() { s.inFlight.Add(-1); s.metrics.inFlight.Dec() }()

	started := time.Now().UTC()
	// Journaled from here on (outcomes.go), so a restarted sidecar settles
	// it without waiting for the ack wait.
	entry := outcome{ID: id, Phase: phaseReceived, Reply: msg.Reply(), Result: messages.Result{StartedAt: started}, Dispatch: d}
	s.journal(log, entry, false)
	s.publishEvent(messages.Event{Type: messages.EventStarted, InvocationID: d.InvocationID, Attempt: d.Attempt, State: messages.StateRunning})

	// Keep the dispatch from being redelivered while the framework runs.
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(s.progressPeriod())
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				s.acked(log, "in_progress", msg.InProgress())
			}
		}
	}()

	callCtx, stopCall := s.callContext(ctx, d, started)
	defer stopCall()
	// handBack returns the dispatch unstarted: it never ran, so a later
	// delivery (or attempt) may run it.
	handBack := func(why string, err error) {
		log.Warn(why+"; handing the dispatch back", "err", err)
		close(stopProgress)
		<-progressDone
		s.unhold(d.InvocationID, ex)
		s.acked(log, "nak", msg.NakWithDelay(time.Second))
		s.forget(log, id)
	}
	payload, perr := s.payload(callCtx, d)
	if perr != nil && !objects.Permanent(perr) && callCtx.Err() == nil {
		// The payload may be readable in a moment (NATS reconnecting).
		handBack("payload unavailable", perr)
		return
	}
	var resp framework.Response
	var err error
	if perr != nil {
		err = perr
	} else {
		// Journaled as started (fsynced) before the framework sees it: a
		// sidecar restarted from here on never starts it again.
		// A start that cannot be journaled is not made: the entry on disk
		// still says received, and a restart would hand it back and start
		// it a second time.
		entry.Phase = phaseStarted
		if jerr := s.outcomes.save(entry, true); jerr != nil {
			handBack("journal: cannot record the start", jerr)
			return
		}
		tctx, span := s.traceInvoke(callCtx, msg, d)
		resp, err = s.invoke(tctx, d, s.frameworkRequest(d, payload))
		tracing.End(span, err)
		s.cancelCall(log, callCtx, d)
	}
	if refused(err) && callCtx.Err() == nil {
		// The framework refused the connection: nothing was sent, so
		// nothing ran. The worker is not ready (no more work is pulled,
		// and the activator, told at once, sends it none) and the dispatch
		// goes back without a result: it runs when the framework is back,
		// and never counts as a failed run.
		s.client.CloseIdleConnections()
		close(stopProgress)
		<-progressDone
		s.notReady(err)
		s.unhold(d.InvocationID, ex)
		s.metrics.refused.Inc()
		log.Warn("framework refused the invocation's connection; handing it back unrun", "err", err)
		s.acked(log, "nak", msg.NakWithDelay(s.unreadyProbe()))
		s.forget(log, id)
		return
	}
	res := s.resultOf(callCtx, d, started, resp, err)
	ex.finish(res.State)
	// The answer is journaled (fsynced) before anything else happens to it.
	entry.Phase, entry.Result = phaseAnswered, res
	s.journal(log, entry, true)

	// The framework has run: from here on only the result is retried,
	// never the call. publishResult keeps trying (the in-progress acks
	// keep the dispatch from redelivery meanwhile, and a redelivery finds
	// it running) until the result is stored or the sidecar's drain is
	// over.
	published := s.publishResult(invCtx, res, id, d)
	close(stopProgress)
	<-progressDone
	dur := res.FinishedAt.Sub(started)
	s.metrics.observe(res.State, dur)
	s.publishEvent(messages.Event{Type: messages.EventFinished, InvocationID: d.InvocationID, Attempt: d.Attempt, State: res.State, DurationMS: dur.Milliseconds()})
	if !published {
		// Shut down with the result unstored: the dispatch is left unacked
		// (a nak would run it again here) and the journal entry stays for
		// the next start; the activator learns from the deregistration
		// what this worker still held.
		log.Error("result not stored before shutdown", "state", res.State)
		return
	}
	s.rememberCompleted(id, d.InvocationID)
	actx, acancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer acancel()
	// The result is published; if this ack is lost, the redelivery is acked
	// as a duplicate (the journal entry stays until an ack is confirmed).
	err = msg.DoubleAck(actx)
	s.acked(log, "ack", err)
	if err == nil {
		s.forget(log, id)
	}
	log.Debug("finished", "state", res.State, "duration", dur)
}

// callContext is ctx ended by dispatch d's deadline, which counts from the
// dispatch as the activator's does: it holds a silent worker's attempt
// until then (+ its grace), so a call started late must not outlive that
// hold.
func (s *Sidecar) callContext(ctx context.Context, d messages.Dispatch, started time.Time) (context.Context, context.CancelFunc) {
	if d.TimeoutSeconds <= 0 {
		return ctx, func() {}
	}
	deadline := started.Add(time.Duration(d.TimeoutSeconds) * time.Second)
	if !d.DispatchedAt.IsZero() {
		deadline = d.DispatchedAt.Add(time.Duration(d.TimeoutSeconds) * time.Second)
	}
	return context.WithDeadlineCause(ctx, deadline, errTimedOut)
}

// frameworkRequest is the envelope of dispatch d's call.
func (s *Sidecar) frameworkRequest(d messages.Dispatch, payload []byte) framework.Request {
	return framework.Request{
		Version:             framework.Version,
		InvocationID:        d.InvocationID,
		Attempt:             d.Attempt,
		ServerlessRequestID: s.cfg.Pool,
		WorkerName:          s.cfg.WorkerName,
		WorkerNamespace:     s.cfg.WorkerNamespace,
		Mode:                string(d.Mode),
		ContentType:         d.ContentType,
		Headers:             d.Headers,
		Attributes:          d.Attributes,
		Payload:             payload,
		TimeoutSeconds:      d.TimeoutSeconds,
		DispatchedAt:        d.DispatchedAt,
	}
}

// cancelCall tells a framework offering the idempotent invoke, where a
// hang-up does not cancel, that the call of d was given up (callCtx ended:
// cancel, timeout, the end of the drain).
func (s *Sidecar) cancelCall(log *slog.Logger, callCtx context.Context, d messages.Dispatch) {
	if callCtx.Err() == nil || !s.idempotent.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.client.Cancel(ctx, framework.Request{InvocationID: d.InvocationID, Attempt: d.Attempt}); err != nil {
		log.Warn("cancel the framework's call", "err", err)
	}
}

// journal saves entry, logging a failure: the call goes on unprotected, as
// without a state directory.
func (s *Sidecar) journal(log *slog.Logger, entry outcome, sync bool) {
	if err := s.outcomes.save(entry, sync); err != nil {
		log.Warn("journal: a restart now would not find this dispatch", "phase", entry.Phase, "err", err)
	}
}

// forget removes dispatch id's journal entry: its result is stored and it
// is acked, or it goes back unstarted.
func (s *Sidecar) forget(log *slog.Logger, id string) {
	if err := s.outcomes.remove(id); err != nil {
		log.Warn("journal", "err", err)
	}
}

// resultOf is the Result of dispatch d's framework call, started at
// started on callCtx, that answered resp or err (never a refusal: the
// caller hands that back).
func (s *Sidecar) resultOf(callCtx context.Context, d messages.Dispatch, started time.Time, fresp framework.Response, err error) messages.Result {
	// The same fields: a field the framework adds fails to compile here
	// until the wire carries it too.
	resp := messages.Response(fresp)
	res := messages.Result{
		InvocationID: d.InvocationID,
		Namespace:    s.cfg.WorkerNamespace,
		Pool:         s.cfg.Pool,
		Worker:       s.cfg.WorkerName,
		Attempt:      d.Attempt,
		StartedAt:    started,
		ResultToken:  d.ResultToken,
	}
	switch {
	case err == nil && d.MaxResultBytes > 0 && messages.PayloadSize(resp.ContentType, resp.Body) > d.MaxResultBytes:
		res.State, res.Error = messages.StateFailed, fmt.Sprintf("the framework's response body of %d bytes exceeds the limit of %d bytes",
			messages.PayloadSize(resp.ContentType, resp.Body), d.MaxResultBytes)
		resp.Body = nil
		res.Response = &resp
	case err == nil && resp.Error == "":
		res.State, res.Response = messages.StateSucceeded, &resp
	case err == nil:
		res.State, res.Response, res.Error = messages.StateFailed, &resp, resp.Error
	case errors.Is(context.Cause(callCtx), errTimedOut):
		res.State, res.Error = messages.StateTimedOut, fmt.Sprintf("%v after %ds", errTimedOut, d.TimeoutSeconds)
	case errors.Is(context.Cause(callCtx), errCancelled):
		res.State, res.Error = messages.StateCancelled, errCancelled.Error()
	case errors.Is(context.Cause(callCtx), errShutdown):
		res.State, res.Error = messages.StateFailed, errShutdown.Error()
	default:
		res.State, res.Error = messages.StateFailed, err.Error()
		// A crashed framework leaves dead keep-alive connections behind.
		s.client.CloseIdleConnections()
	}
	res.FinishedAt = time.Now().UTC()
	return res
}

// handBackLoop runs while a draining worker's invocations finish (until
// done closes): it keeps pulling its dispatch consumer and hands back every
// dispatch it has not started — one the activator sent before it saw the
// drain, or one a pull brought in too late — so another worker runs it
// now, not after this worker's running invocations end.
func (s *Sidecar) handBackLoop(done <-chan struct{}, cons jetstream.Consumer) {
	wait := min(s.cfg.FetchWait, 250*time.Millisecond)
	for {
		select {
		case <-done:
			return
		default:
		}
		msg, err := cons.Next(jetstream.FetchMaxWait(wait))
		if err != nil {
			if !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
				select {
				case <-done:
					return
				case <-time.After(wait):
				}
			}
			continue
		}
		s.handBack(msg)
	}
}

// handBack gives a dispatch this draining worker will not run back to the
// activator: the message is termed (never redelivered here) and an
// invocation.handed_back Event names the attempt, which the activator
// queues again at once without counting it as run. A redelivery of an
// invocation running or finished here is not handed back: it is kept in
// progress or acked as handle does. Should the Event be lost, the
// deregistration (inFlight 0) redelivers it the same way.
func (s *Sidecar) handBack(msg jetstream.Msg) {
	var d messages.Dispatch
	if err := json.Unmarshal(msg.Data(), &d); err != nil || d.InvocationID == "" {
		s.acked(s.log, "term", msg.TermWithReason("undecodable dispatch"))
		return
	}
	id := messages.DispatchMsgID(s.cfg.WorkerNamespace, d.InvocationID, d.Attempt)
	log := s.log.With("invocation", d.InvocationID, "attempt", d.Attempt)
	s.mu.Lock()
	_, running := s.running[id]
	_, completed := s.completed[id]
	replayed, replaying := s.replaying[id]
	s.mu.Unlock()
	switch {
	case replaying:
		// Being settled from the journal: never handed to another worker.
		s.keepUntilReplayed(log, msg, id, replayed)
		return
	case completed:
		s.acked(log, "ack", msg.Ack())
		return
	case running:
		s.acked(log, "in_progress", msg.InProgress())
		return
	}
	if err := msg.TermWithReason("handed back: worker draining"); err != nil {
		// Not termed: it comes back here after the ack wait, and is handed
		// back again (or redelivered by the deregistration).
		s.acked(log, "term", err)
		return
	}
	s.metrics.handedBack.Inc()
	log.Info("handed back an unstarted dispatch")
	s.publishEvent(messages.Event{Type: messages.EventHandedBack, InvocationID: d.InvocationID, Attempt: d.Attempt})
}

// acked logs and counts a failed acknowledgement: JetStream then
// redelivers the dispatch after the ack wait, where the completed and
// running sets keep it from running twice.
func (s *Sidecar) acked(log *slog.Logger, op string, err error) {
	if err == nil {
		return
	}
	s.metrics.ackErrors.WithLabelValues(op).Inc()
	log.Warn("jetstream acknowledgement failed", "op", op, "err", err)
}

// publishResult stores the result in the results stream and answers a sync
// caller. It reports whether the result is durable. The result carries no
// Nats-Msg-Id: the results stream is shared by every tenant's workers,
// who choose their own headers, so an ID could be pre-claimed by another
// worker and this result dropped as its duplicate. A retry after a lost
// publish ack may store the result twice; the activator handles the
// second copy as a no-op.
//
// It retries until the result is stored, however long NATS is away or the
// results stream is full, with backoff up to maxPublishBackoff, and gives
// up only when stop ends (the drain's grace is over) — a result that cannot
// be stored must never turn into a second run of the framework.
func (s *Sidecar) publishResult(stop context.Context, res messages.Result, id string, d messages.Dispatch) bool {
	replyTo := d.ReplyTo
	data, res, err := s.encodeResult(res, d)
	if err != nil {
		s.log.Error("encode result", "err", err)
		return false
	}
	ok := false
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Cap: maxPublishBackoff, Steps: math.MaxInt32}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = s.js.Publish(ctx, s.subjects.Result(s.cfg.WorkerNamespace, s.cfg.Pool), data)
		cancel()
		if err == nil {
			ok = true
			break
		}
		s.metrics.publishRetries.Inc()
		s.log.Warn("publish result; retrying", "invocation", res.InvocationID, "err", err, "in", backoff.Duration)
		select {
		case <-stop.Done():
		case <-time.After(backoff.Step()):
		}
		if stop.Err() != nil {
			break
		}
	}
	if replyTo != "" {
		m := nats.NewMsg(replyTo)
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, id)
		if err := s.nc.PublishMsg(m); err != nil {
			s.log.Warn("sync reply", "invocation", res.InvocationID, "err", err)
		}
	}
	return ok
}

// completedID is a dispatch ID in completed and its invocation's ID.
type completedID struct{ id, inv string }

// maxPublishBackoff bounds the wait between two tries to store a result.
const maxPublishBackoff = 2 * time.Second

// execution is one attempt this sidecar ran of an invocation.
type execution struct {
	attempt int
	state   atomic.Pointer[messages.State] // nil while running
}

func (e *execution) finish(st messages.State) { e.state.Store(&st) }

// mayRunAgain: a later attempt d may run here only once this one ended and
// failed, or ended with a response the pool's retry policy retries (a 503
// answered without error is "succeeded" here, so d says which attempt it
// retries); one running, or finished and not retried, is never run twice.
func (e *execution) mayRunAgain(d messages.Dispatch) bool {
	st := e.state.Load()
	return st != nil && (*st == messages.StateFailed || d.RetryOf == e.attempt)
}

// refused reports whether err is the framework refusing the connection
// (no socket, nobody listening): the request was never sent.
func refused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// notReady marks the framework not ready until the next probe that passes,
// and tells the activator at once.
func (s *Sidecar) notReady(err error) {
	if s.ready.Swap(false) {
		s.log.Info("framework readiness changed", "ready", false, "err", err)
		s.metrics.ready.Set(0)
		s.publishEvent(messages.Event{Type: messages.EventHeartbeat})
		select {
		case s.reprobe <- struct{}{}:
		default:
		}
	}
}

func (s *Sidecar) rememberCompleted(id, inv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.completed[id]; ok {
		return
	}
	s.completed[id] = struct{}{}
	s.order = append(s.order, completedID{id, inv})
	if len(s.order) > completedCap {
		delete(s.completed, s.order[0].id)
		if ex := s.held[s.order[0].inv]; ex != nil && ex.state.Load() != nil {
			delete(s.held, s.order[0].inv)
		}
		s.order = s.order[1:]
	}
}

// onCancel cancels a running invocation; attempt 0 matches any attempt.
func (s *Sidecar) onCancel(m *nats.Msg) {
	var c messages.Cancel
	if err := json.Unmarshal(m.Data, &c); err != nil || c.InvocationID == "" {
		s.log.Warn("ignoring undecodable cancel", "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, cancel := range s.running {
		if c.Attempt != 0 && id != messages.DispatchMsgID(s.cfg.WorkerNamespace, c.InvocationID, c.Attempt) {
			continue
		}
		if c.Attempt == 0 && !isAttemptOf(id, messages.MsgID(s.cfg.WorkerNamespace, c.InvocationID)) {
			continue
		}
		s.log.Info("cancelling invocation", "invocation", c.InvocationID, "attempt", c.Attempt)
		cancel(errCancelled)
	}
}

// isAttemptOf reports whether dispatch ID id is an attempt of invocation inv.
func isAttemptOf(id, inv string) bool {
	if len(id) <= len(inv)+1 || id[:len(inv)] != inv || id[len(inv)] != '.' {
		return false
	}
	for _, r := range id[len(inv)+1:] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// probeLoop keeps the framework's health in s.ready, and publishes a
// heartbeat at once when it changes so the activator learns quickly.
//
// While the framework is not ready it is probed at least every second, so a
// worker whose framework restarted takes work (the dispatches it handed
// back first) as soon as it serves again.
func (s *Sidecar) probeLoop(ctx context.Context) {
	for {
		pctx, cancel := context.WithTimeout(ctx, max(s.cfg.ProbeInterval, time.Second))
		caps, err := s.client.Probe(pctx)
		cancel()
		if err == nil {
			s.idempotent.Store(caps.IdempotentInvoke)
		}
		now := err == nil
		if was := s.ready.Swap(now); was != now {
			s.log.Info("framework readiness changed", "ready", now, "err", err)
			s.metrics.ready.Set(b2f(now))
			if now {
				select {
				case s.wakeFetch <- struct{}{}:
				default:
				}
			}
			if s.consumer.Load() != nil {
				s.publishEvent(messages.Event{Type: messages.EventHeartbeat})
			}
		}
		every := s.cfg.ProbeInterval
		if !now {
			every = s.unreadyProbe()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.reprobe:
		case <-time.After(every):
		}
	}
}

// unreadyProbe is the probe period while the framework is not ready.
func (s *Sidecar) unreadyProbe() time.Duration { return min(s.cfg.ProbeInterval, time.Second) }

func (s *Sidecar) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.publishEvent(messages.Event{Type: messages.EventHeartbeat})
		}
	}
}

// publishEvent fills the worker's identity and load into e and publishes it
// on its own metrics.<ns>.<pool>.<worker> (core NATS: a lost event is
// superseded by the next).
func (s *Sidecar) publishEvent(e messages.Event) {
	e.Pool = s.cfg.Pool
	e.Worker = s.cfg.WorkerName
	e.Namespace = s.cfg.WorkerNamespace
	e.Concurrency = s.cfg.Concurrency
	e.InFlight = int(s.inFlight.Load())
	e.Ready = s.ready.Load() && !s.draining.Load()
	e.Draining = s.draining.Load()
	e.At = time.Now().UTC()
	data, err := json.Marshal(e)
	if err != nil {
		s.log.Error("encode event", "err", err)
		return
	}
	if err := s.nc.Publish(s.subjects.Events(s.cfg.WorkerNamespace, s.cfg.Pool, s.cfg.WorkerName), data); err != nil {
		s.log.Warn("publish event", "type", e.Type, "err", err)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
