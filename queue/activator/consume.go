package activator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/tracing"
	"github.com/runplane/runplane/queue/activator/internal/state"
	"github.com/runplane/runplane/queue/stream"
)

// durable is one of the activator's durable consumers and its Consume.
// Only Run's goroutine touches it.
type durable struct {
	a      *Activator
	stream string
	name   string
	cfg    jetstream.ConsumerConfig
	h      func(epoch uint64, m jetstream.Msg)
	cc     jetstream.ConsumeContext
	// nss are the namespaces the invoke consumer filters on (sharded);
	// epoch is the state's for its current making (state.InvokeConsumer).
	nss   []string
	epoch uint64
}

// consume runs h on every message of filters of stream streamName through
// the durable consumer <prefix>-<name>; nss are the namespaces of the
// filters (sharded). h is told the epoch of the consumer's making
// (state.InvokeConsumer; invoke only).
func (a *Activator) consume(ctx context.Context, streamName, name string, nss []string, ackWait time.Duration,
	h func(ctx context.Context, epoch uint64, m jetstream.Msg)) (*durable, error) {
	kind := "invoke"
	if name == "results" {
		kind = "result"
	}
	d := &durable{a: a, stream: streamName, name: name, nss: nss, h: func(epoch uint64, m jetstream.Msg) { h(ctx, epoch, m) }, cfg: jetstream.ConsumerConfig{
		Durable:       a.cfg.Shard.consumerPrefix(a.cfg.ConsumerPrefix) + "-" + name,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       ackWait,
		MaxAckPending: 20000,
		// Bounded: a message that fails this often is dead-lettered by
		// onMaxDeliveries instead of being delivered for ever.
		MaxDeliver: ActivatorMaxDeliver,
	}}
	d.filter(a.filters(kind, nss))
	if err := d.start(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// filter sets the consumer's subjects (one as FilterSubject: what the
// unsharded activator's consumers always had).
func (d *durable) filter(subjects []string) {
	d.cfg.FilterSubject, d.cfg.FilterSubjects = "", nil
	if len(subjects) == 1 {
		d.cfg.FilterSubject = subjects[0]
	} else {
		d.cfg.FilterSubjects = subjects
	}
}

func (d *durable) start(ctx context.Context) error {
	a := d.a
	c, err := a.cfg.Store.JS.CreateOrUpdateConsumer(ctx, d.stream, d.cfg)
	if err != nil {
		return fmt.Errorf("create consumer %s: %w", d.cfg.Durable, err)
	}
	info := c.CachedInfo()
	switch {
	case info == nil:
	case d.name == "results":
		// Results up to the ack floor were handled by a previous leader.
		a.locked(func(s *state.State) { s.NoteResultSeq(info.AckFloor.Stream) })
	case d.name == "invoke":
		in := state.Intake{All: !a.cfg.Shard.Sharded(), Namespaces: d.nss, AckFloor: info.AckFloor.Stream,
			Delivered: info.Delivered.Stream, AckPending: info.NumAckPending}
		a.locked(func(s *state.State) { d.epoch = s.InvokeConsumer(in) })
	}
	epoch := d.epoch
	// Consume pulls in batches (up to 500 messages) and hands them over one
	// by one; the handlers never wait on the network for long.
	d.cc, err = c.Consume(func(m jetstream.Msg) { d.h(epoch, m) }, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if !errors.Is(err, jetstream.ErrNoHeartbeat) {
			a.cfg.Logger.Debug("consumer error", "consumer", d.name, "err", err)
		}
	}))
	if err != nil {
		return fmt.Errorf("consume %s: %w", d.name, err)
	}
	return nil
}

// update changes the consumer's subjects in place: it keeps its acks and
// delivers only what is stored after its delivered sequence.
func (d *durable) update(ctx context.Context, subjects []string) error {
	d.filter(subjects)
	if _, err := d.a.cfg.Store.JS.UpdateConsumer(ctx, d.stream, d.cfg); err != nil {
		return fmt.Errorf("update consumer %s: %w", d.cfg.Durable, err)
	}
	return nil
}

// recreate makes the invoke consumer again on namespaces nss, delivering
// from the stream's start.
func (d *durable) recreate(ctx context.Context, nss []string) error {
	defer d.remaking()()
	d.Stop()
	if err := d.a.cfg.Store.JS.DeleteConsumer(ctx, d.stream, d.cfg.Durable); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("delete consumer %s: %w", d.cfg.Durable, err)
	}
	d.nss = nss
	d.filter(d.a.filters("invoke", nss))
	return d.start(ctx)
}

// remaking notes that the invoke consumer is being made again until the
// returned func is called, seqlock-style: its generation is odd
// meanwhile, and counts up again once it is made (purge.go: an ack floor
// read while it is odd, or across the change, may be the old consumer's
// and is not used; review H3).
func (d *durable) remaking() func() {
	if d.name != "invoke" {
		return func() {}
	}
	d.a.invokeGen.Add(1)
	return func() { d.a.invokeGen.Add(1) }
}

// Stop stops the consumer's deliveries (the consumer stays).
func (d *durable) Stop() {
	if d.cc != nil {
		d.cc.Stop()
		d.cc = nil
	}
}

// consumers are a Run's two durable consumers and the namespaces they
// filter on (sharded).
type consumers struct {
	invoke, results *durable
	nss             []string
}

// acked logs and counts a failed Ack, Nak or Term of a message of consumer:
// JetStream then redelivers it after the ack wait.
func (a *Activator) acked(consumer, op string, m jetstream.Msg, err error) {
	if err == nil {
		return
	}
	a.metrics.ackErrors.WithLabelValues(consumer, op).Inc()
	a.cfg.Logger.Warn("jetstream acknowledgement failed", "consumer", consumer, "op", op, "subject", m.Subject(), "err", err)
}

// handled acks (op "ack") or terms the invocation message m of inv at
// seq: from here on the invoke consumer's ack floor covers it, so the
// state's delivery mark (state.Delivered) goes first.
func (a *Activator) handled(op string, m jetstream.Msg, inv messages.Invocation, seq uint64) {
	a.locked(func(s *state.State) { s.Handled(state.Subject{Namespace: inv.Namespace, Pool: inv.Pool}, seq) })
	if op == "term" {
		a.acked("invoke", op, m, m.Term())
		return
	}
	a.acked("invoke", op, m, m.Ack())
}

// freshAge: an invocation consumed within this of being stored has its
// Record as the ingress created it (or cancelled, which the dispatch
// compare-and-set finds), so it is queued without reading the Record.
const freshAge = 2 * time.Second

// onInvocation takes a new invocation from invoke.<pool>, delivered by the
// invoke consumer of epoch.
func (a *Activator) onInvocation(ctx context.Context, epoch uint64, m jetstream.Msg) {
	const c = "invoke"
	var inv messages.Invocation
	if err := json.Unmarshal(m.Data(), &inv); err != nil || inv.InvocationID == "" || inv.Pool == "" || inv.Namespace == "" {
		a.cfg.Logger.Warn("dropping malformed invocation", "subject", m.Subject(), "err", err)
		a.acked(c, "term", m, m.Term())
		return
	}
	md, err := m.Metadata()
	if err != nil {
		// No sequence: never for a message the consumer delivered (its
		// reply subject is the server's).
		a.acked(c, "nak", m, m.Nak())
		return
	}
	var known bool
	if ns, p, ok := a.cfg.Store.Subjects.ParseInvoke(m.Subject()); !ok || ns != inv.Namespace || p != inv.Pool {
		a.cfg.Logger.Warn("dropping invocation whose body names another pool than its subject", "subject", m.Subject(), "namespace", inv.Namespace, "pool", inv.Pool)
		a.acked(c, "term", m, m.Term())
		return
	}
	var limitSet, isCopy bool
	a.locked(func(s *state.State) {
		s.Consumed(epoch, md.Sequence.Stream)
		known = s.Accept(inv, md.Sequence.Stream)
		isCopy = known && s.Copy(inv, md.Sequence.Stream)
		limitSet = s.Pool(state.PoolKey(inv)).LimitSet
	})
	if !limitSet {
		// A pool's first invocation: its own in-flight bound applies from
		// the start (publishStatus refreshes it on every tick).
		if pl, ok := a.cfg.Pools.Lookup(inv.Namespace, inv.Pool); ok {
			a.locked(func(s *state.State) { s.SetMaxInFlight(state.PoolKey(inv), a.cfg.Limits.InFlight(pl.Policy)) })
		}
	}
	if known {
		if isCopy {
			a.removeCopy(ctx, inv, md.Sequence.Stream)
		}
		a.handled("ack", m, inv, md.Sequence.Stream)
		return
	}
	st := a.cfg.Store
	it := &state.Item{Inv: inv, Seq: md.Sequence.Stream}
	it.Trace = tracing.FromNATS(m.Headers())
	rev, _ := strconv.ParseUint(m.Headers().Get(stream.RevisionHeader), 10, 64)
	if rev != 0 && md.NumDelivered == 1 && a.cfg.Clock.Since(md.Timestamp) < freshAge {
		it.FromIngress(rev, st.Config.Stream, m.Headers().Get(stream.RequestHashHeader), int64(len(m.Data()))+stream.MessageOverhead)
		a.enqueue(ctx, m, it)
		return
	}
	// Stored a while ago (the activator was away, or the consumer fell
	// behind): it may have been cancelled or timed out since, so its Record
	// is read — off the consumer's goroutine, which serves every
	// namespace: a backlog of one tenant's stale messages must not hold
	// another tenant's fresh ones behind a Record read each.
	a.wg.Go(func() {
		rec, rev, err := st.Get(ctx, stream.Key(inv.Namespace, inv.InvocationID))
		switch {
		case errors.Is(err, stream.ErrNotFound):
			// The Record expired or was removed after a failed publish
			// response; the message is authoritative and the dispatch
			// creates the Record.
		case err != nil:
			a.acked(c, "nak", m, m.NakWithDelay(time.Second))
			return
		case rec.State != messages.StateQueued:
			// Finished, or dispatched by this leader (then it is known) or
			// by the one before (then rebuild loaded it): nothing to do.
			// A finished invocation's message (a re-post's late copy)
			// leaves the stream as its others did.
			if rec.State.Terminal() {
				a.removeCopy(ctx, inv, md.Sequence.Stream)
			}
			a.handled("ack", m, inv, md.Sequence.Stream)
			return
		default:
			it.Rec = messages.Cached{Record: rec, Rev: rev}
			it.Attempt, it.Unverified = rec.Attempt, rec.Attempt
			state.RestoreRetries(it, rec)
		}
		a.enqueue(ctx, m, it)
	})
}

// enqueue queues it (from invocation message m) unless it is open already
// (m is then a copy, removed), and acks m.
func (a *Activator) enqueue(ctx context.Context, m jetstream.Msg, it *state.Item) {
	var added, isCopy bool
	a.locked(func(s *state.State) {
		if added = s.Enqueue(it); !added {
			isCopy = s.Copy(it.Inv, it.Seq)
		}
	})
	if added {
		a.metrics.accepted.WithLabelValues(it.Inv.Namespace, it.Inv.Pool).Inc()
	}
	if isCopy {
		a.removeCopy(ctx, it.Inv, it.Seq)
	}
	a.handled("ack", m, it.Inv, it.Seq)
	a.poke()
}

// removeCopy deletes the invocation message at seq, a copy of inv's (or
// that of a finished invocation). One left behind (a failed delete) stays
// uncounted until inv finishes and the sweep meets it.
func (a *Activator) removeCopy(ctx context.Context, inv messages.Invocation, seq uint64) {
	err := a.cfg.Store.DeleteMsg(ctx, seq)
	switch {
	case err == nil:
		a.metrics.removed.WithLabelValues("copy").Inc()
	case errors.Is(err, jetstream.ErrMsgNotFound):
	default:
		a.cfg.Logger.Warn("remove a copy of an invocation's message", "invocation", inv.InvocationID, "seq", seq, "err", err)
	}
}

// onResult records a worker's result and frees its slot. Results come
// from the results stream, where workers publish with headers of their
// choosing and no message ID is trusted: a result stored twice is handled
// twice, and the second time changes nothing (its invocation is forgotten
// and its Record final, which TransitionOfPool never changes). The state
// changes at once, in stream order (so a lost worker's invocations can
// wait for the results it published before it went); the Record write runs
// concurrently and the result is acked after it.
func (a *Activator) onResult(ctx context.Context, m jetstream.Msg) {
	const c = "results"
	var res messages.Result
	if err := json.Unmarshal(m.Data(), &res); err != nil || res.InvocationID == "" {
		a.acked(c, "term", m, m.Term())
		return
	}
	// The subject, which NATS permissions tie to the worker's pool, says
	// whose result it is; the body cannot name another pool.
	ns, p, ok := a.cfg.Store.Subjects.ParseResult(m.Subject())
	if !ok {
		a.acked(c, "term", m, m.Term())
		return
	}
	if res.Namespace != ns || res.Pool != p {
		a.metrics.foreign.WithLabelValues("result").Inc()
		a.cfg.Logger.Warn("result names another pool than its subject; taken as of the subject's pool", "subject", m.Subject(),
			"namespace", res.Namespace, "pool", res.Pool, "invocation", res.InvocationID)
		res.Namespace, res.Pool = ns, p
	}
	final := res.State
	if !final.Terminal() {
		final = messages.StateFailed
		if res.Error == "" {
			res.Error = fmt.Sprintf("worker reported non-terminal state %q as result", res.State)
		}
	}
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	var it *state.Item
	var other *state.Superseded
	var refused string
	// The pool's retry policy (none by default) may take a failure.
	pol := a.retryPolicy(res.Namespace, res.Pool)
	retry, retryDelay, retries := state.NoRetry, time.Duration(0), 0
	a.locked(func(s *state.State) {
		if refused = s.Refusal(res); refused != "" {
			s.NoteResultSeq(seq)
			return
		}
		if pol.Matches(res.State, statusCode(res)) {
			var open *state.Item
			if open = s.Item(state.Key(res.Namespace, res.InvocationID)); open != nil {
				retryDelay = pol.Delay(open.Retries + 1)
			}
			switch retry, it = s.RetryOf(res, seq, pol.MaxRetries, retryDelay); retry {
			case state.Retried:
				retries = it.Retries
				return
			case state.Stale:
				s.NoteResultSeq(seq)
				refused = state.RefusedRetried
				return
			}
		}
		it, other = s.Result(res, seq)
	})
	if refused != "" {
		a.refuseResult(m, res, refused)
		return
	}
	switch retry {
	case state.Retried:
		a.poke()
		a.wg.Go(func() { a.recordRetry(ctx, m, it, res, retries, retryDelay) })
		return
	case state.Exhausted:
		if other != nil {
			a.sendCancel(other.Namespace, other.Pool, other.Worker, other.InvocationID, other.Attempt)
		}
		a.poke()
		a.wg.Go(func() { a.retriesExhausted(ctx, m, it, res, pol) })
		return
	}
	if other != nil {
		a.sendCancel(other.Namespace, other.Pool, other.Worker, other.InvocationID, other.Attempt) // a newer attempt runs elsewhere
	}
	a.poke()

	a.wg.Go(func() {
		record := func(r *messages.Record) {
			r.Response, r.ResponseBodyRef, r.Error = res.Response, res.ResponseBodyRef, res.Error
			if pol.Enabled() || len(r.Attempts) > 0 {
				r.Attempts = append(r.Attempts, outcomeOf(res))
			}
		}
		var ok bool
		var err error
		key := stream.Key(res.Namespace, res.InvocationID)
		if it != nil {
			ok, err = a.write(ctx, it, func(cached *messages.Cached) (bool, error) {
				return a.cfg.Store.TransitionOfPool(ctx, key, cached, res.Pool, final, res.Worker, res.Attempt, record)
			})
		} else {
			// Not open here: only the worker of the Record's current
			// attempt may finish it.
			var cached messages.Cached
			ok, err = a.cfg.Store.UpdateCached(ctx, key, &cached, func(r *messages.Record) bool {
				if r.Pool != res.Pool || r.Worker != res.Worker || r.Attempt != res.Attempt || !stream.Advance(r.State, r.Attempt, final, res.Attempt) {
					return false
				}
				r.State = final
				record(r)
				stream.LeavesStream(r) // its messages, if any are left, go with the sweep
				return true
			})
		}
		if err != nil && !errors.Is(err, stream.ErrNotFound) {
			// Redelivered; the item is forgotten, so it takes the path above
			// without a known Record.
			a.acked(c, "nak", m, m.NakWithDelay(500*time.Millisecond))
			return
		}
		a.acked(c, "ack", m, m.Ack())
		if ok {
			a.metrics.finished.WithLabelValues(res.Namespace, res.Pool, string(final)).Inc()
		}
	})
}

// refuseResult drops a result its worker was not dispatched (state.Refusal):
// counted, logged, acked (a redelivery would be refused again).
func (a *Activator) refuseResult(m jetstream.Msg, res messages.Result, reason string) {
	a.metrics.refused.WithLabelValues(reason).Inc()
	a.cfg.Logger.Warn("refusing a result from a worker the attempt was not dispatched to", "namespace", res.Namespace, "pool", res.Pool,
		"invocation", res.InvocationID, "worker", res.Worker, "attempt", res.Attempt, "reason", reason)
	a.acked("results", "ack", m, m.Ack())
}

// proofEvery is how often the server is asked how far the invoke consumer
// handled the stream (state/intake.go): two JetStream API requests.
const proofEvery = time.Second

// streamLast is the invocation stream's last sequence as one ask read it,
// and when, for a later ask (proveIntake): the last two asks' are kept,
// as the last one's is often less than proofEvery old at the next.
type streamLast struct {
	epoch, seq uint64
	at         time.Time
}

// proveIntake asks the server how far the invoke consumer d handled the
// stream (state/intake.go), off Run's goroutine, one ask at a time: the
// consumer's ack floor, or, when it has nothing unacked, the last stream
// sequence it delivered or went past; and when it has nothing pending
// either, the stream's last sequence an earlier ask read at least
// proofEvery before this ask's consumer read (asks start a second apart,
// but one that took long read the stream just before the next began: a
// review; a message removed before it was delivered is one the
// consumer never goes past). Not this ask's: the stream's leader may
// have stored a message that the consumer's replica of the stream has not
// yet, and does not count pending. Called on Run's goroutine, which alone
// makes d again: what is read is noted under the epoch of the making it
// was read for.
func (a *Activator) proveIntake(ctx context.Context, d *durable) {
	if !a.proving.CompareAndSwap(false, true) {
		return
	}
	epoch, streamName, name := d.epoch, d.stream, d.cfg.Durable
	a.wg.Go(func() {
		defer a.proving.Store(false)
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		c, err := a.cfg.Store.JS.Consumer(ctx, streamName, name)
		if err != nil {
			a.cfg.Logger.Debug("read the invoke consumer's ack floor", "err", err)
			return
		}
		read := a.cfg.Clock.Now()
		info := c.CachedInfo()
		floor := info.AckFloor.Stream
		if info.NumAckPending == 0 {
			floor = max(floor, info.Delivered.Stream)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 {
			for _, prev := range a.streamLast {
				if prev.epoch == epoch && read.Sub(prev.at) >= proofEvery {
					floor = max(floor, prev.seq)
					break
				}
			}
		}
		a.locked(func(s *state.State) { s.AckFloor(epoch, floor) })
		si, err := a.cfg.Store.Stream.Info(ctx)
		if err != nil {
			a.cfg.Logger.Debug("read the invocation stream's last sequence", "err", err)
			return
		}
		a.streamLast = [2]streamLast{{epoch: epoch, seq: si.State.LastSeq, at: a.cfg.Clock.Now()}, a.streamLast[0]}
	})
}
