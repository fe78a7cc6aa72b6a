package activator

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/tracing"
	"github.com/runplane/runplane/queue/activator/internal/state"
	"github.com/runplane/runplane/queue/stream"
)

// dispatchAll carries out the state's dispatch decisions, each in its own
// goroutine so no pool or invocation waits on another.
func (a *Activator) dispatchAll(ctx context.Context) {
	var as []state.Assignment
	a.locked(func(s *state.State) { as = s.Dispatch() })
	for _, as := range as {
		a.wg.Go(func() { a.dispatch(ctx, as.Item, as.Worker, as.Attempt) })
	}
}

// dispatch records attempt of it as current and publishes it to worker.
func (a *Activator) dispatch(ctx context.Context, it *state.Item, worker string, attempt int) {
	st := a.cfg.Store
	id := stream.Key(it.Inv.Namespace, it.Inv.InvocationID)
	inv := it.Inv
	if it.Light {
		// Read back before the attempt is recorded: an invocation whose
		// message is gone can never be dispatched, and is dead-lettered
		// rather than retried for ever.
		full, err := a.readInvocation(ctx, it)
		if errors.Is(err, errInvocationGone) {
			a.cfg.Logger.Error("dispatch: invocation gone from the stream; dead-lettering it", "invocation", id, "err", err)
			a.locked(func(s *state.State) { s.Forget(it, worker) })
			a.deadLetter(ctx, it, err.Error())
			a.poke()
			return
		}
		if err != nil {
			a.cfg.Logger.Warn("dispatch: read invocation; requeue", "invocation", id, "err", err)
			a.locked(func(s *state.State) { s.Requeue(it, worker, time.Second) })
			return
		}
		inv = full
	}
	// The Record is the source of truth: a Dispatch is published only after
	// the compare-and-set that makes this attempt the current one.
	ok, err := a.write(ctx, it, func(c *messages.Cached) (bool, error) {
		ok, err := st.TransitionCached(ctx, id, c, messages.StateDispatched, worker, attempt, func(r *messages.Record) {
			if r.Sequence == 0 {
				r.Stream, r.Sequence = st.Config.Stream, it.Seq
			}
		})
		if !errors.Is(err, stream.ErrNotFound) {
			return ok, err
		}
		// The Record expired or was removed after a publish that did not
		// answer; the message is authoritative.
		r := messages.Record{InvocationID: it.Inv.InvocationID, Namespace: it.Inv.Namespace, Pool: it.Inv.Pool, Mode: it.Inv.Mode, State: messages.StateDispatched, Worker: worker,
			Attempt: attempt, Stream: st.Config.Stream, Sequence: it.Seq, AcceptedAt: it.Inv.AcceptedAt, UpdatedAt: a.cfg.Clock.Now().UTC(), NamespaceUID: it.Inv.NamespaceUID}
		rev, err := st.Create(ctx, r)
		if errors.Is(err, stream.ErrExists) {
			// Created meanwhile: apply the transition to it.
			*c = messages.Cached{}
			return st.TransitionCached(ctx, id, c, messages.StateDispatched, worker, attempt, nil)
		}
		if err != nil {
			return false, err
		}
		*c = messages.Cached{Record: r, Rev: rev}
		return true, nil
	})
	if err != nil {
		a.cfg.Logger.Warn("dispatch: record update failed; requeue", "invocation", id, "err", err)
		a.locked(func(s *state.State) { s.Requeue(it, worker, time.Second) })
		return
	}
	if !ok {
		// Cancelled, finished elsewhere or superseded: forget it.
		a.locked(func(s *state.State) { s.Forget(it, worker) })
		a.poke()
		return
	}
	if err := a.publishDispatch(ctx, it, inv, worker, attempt); err != nil {
		a.cfg.Logger.Warn("dispatch: publish failed; requeue", "invocation", id, "err", err)
		a.locked(func(s *state.State) { s.Requeue(it, worker, time.Second) })
		return
	}
	a.metrics.dispatched.WithLabelValues(it.Inv.Namespace, it.Inv.Pool).Inc()
}

// write runs one Record write of it, serialised with its other writes.
// Once the Record is final (whoever made it so), the invocation's messages
// leave the stream: the Record keeps what callers read.
func (a *Activator) write(ctx context.Context, it *state.Item, fn func(c *messages.Cached) (bool, error)) (bool, error) {
	it.WriteMu.Lock()
	it.Unlighten()
	ok, err := fn(&it.Rec)
	final, counted := it.Rec.Record.State.Terminal(), it.Rec.Record.StreamBytes > 0
	it.WriteMu.Unlock()
	if final && a.removeMessages(ctx, it, counted) && counted {
		// Made final by someone else (a cancel): the namespace's share of
		// the stream is given back once the messages are gone.
		if err := a.cfg.Store.ClearStreamBytes(ctx, stream.Key(it.Inv.Namespace, it.Inv.InvocationID)); err != nil {
			a.cfg.Logger.Warn("clear a final Record's share of the stream; the sweep will", "invocation", it.Inv.InvocationID, "err", err)
		}
	}
	return ok, err
}

// publishDispatch publishes attempt of it (whose invocation, payload
// included, is inv) to worker, retrying under the same Nats-Msg-Id (the
// stream drops a copy within the duplicate window), and notes the
// Dispatch's stream sequence.
func (a *Activator) publishDispatch(ctx context.Context, it *state.Item, inv messages.Invocation, worker string, attempt int) error {
	st := a.cfg.Store
	token, err := resultToken()
	if err != nil {
		return err
	}
	// The Dispatch carries the time the activator counts the attempt's
	// deadline from (the sidecar stops the call by then).
	var dispatchedAt time.Time
	var retryOf int
	// Until the publish answers, the worker's subject is held below any
	// sequence it can get: no purge takes the Dispatch before its
	// sequence is known.
	var placeholder state.Hold
	a.locked(func(s *state.State) {
		token, dispatchedAt, retryOf = s.SetResultToken(it, attempt, token), it.DispatchedAt, it.RetriedResult
		placeholder = s.Publishing(it, worker)
	})
	published := false
	defer func() {
		if !published {
			a.locked(func(s *state.State) { s.PublishFailed(placeholder) })
		}
	}()
	if pol := a.retryPolicy(inv.Namespace, inv.Pool); pol.Enabled() && it.Retries < pol.MaxRetries {
		// A failure of this attempt may be retried: the sync caller waits
		// for the Record, not for this worker's direct reply.
		inv.ReplyTo = ""
	}
	b, err := messages.Encode(messages.Dispatch{Invocation: inv, Worker: worker, Attempt: attempt, DispatchedAt: cmp.Or(dispatchedAt, a.cfg.Clock.Now()).UTC(), ResultToken: token,
		RetryOf: retryOf})
	if err != nil {
		return fmt.Errorf("encode dispatch: %w", err)
	}
	ctx, span := a.traceDispatch(ctx, it, worker, attempt)
	defer span.End()
	msgID := messages.DispatchPublishID(it.Inv.Namespace, it.Inv.InvocationID, attempt)
	subject := st.Subjects.Dispatch(it.Inv.Namespace, it.Inv.Pool, worker)
	pa, err := publishUntilKnown(ctx, a.cfg.Clock, func(ctx context.Context) (*jetstream.PubAck, error) {
		msg := &nats.Msg{Subject: subject, Data: b, Header: nats.Header{}}
		tracing.ToNATS(ctx, msg.Header)
		return st.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(msgID))
	}, func(err error) {
		a.cfg.Logger.Warn("dispatch: publish outcome unknown; retrying the same publish to the same worker", "invocation", msgID, "worker", worker, "err", err)
	})
	if err != nil {
		return fmt.Errorf("publish dispatch %s: %w", msgID, err)
	}
	published = true
	a.locked(func(s *state.State) { s.Dispatched(it, attempt, placeholder, pa.Sequence) })
	return nil
}

// publishUntilKnown publishes with publish until the stream answers. An
// error the stream answered (an API error: refused, not stored) is
// returned after a few tries, and the caller may requeue the attempt
// elsewhere. Any other error (a timeout, no responders, a broken
// connection: the stream may have stored the message and lost its ack)
// leaves the outcome unknown: the same publish — same Nats-Msg-Id, so the
// stream's duplicate window drops a second copy, and the same worker,
// whose sidecar runs one attempt once whatever reaches it twice — is
// retried until it is answered or ctx ends. Requeueing it to another
// worker could run an attempt that was in fact stored twice. Should ctx
// end (the activator stops or loses its lease), the next leader rebuilds
// the attempt from its Record, which already names this worker.
func publishUntilKnown(ctx context.Context, clk clock.Clock, publish func(context.Context) (*jetstream.PubAck, error), unknown func(error)) (*jetstream.PubAck, error) {
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Cap: 2 * time.Second, Steps: math.MaxInt32}
	for i := 0; ; i++ {
		pa, err := publish(ctx)
		if err == nil {
			return pa, nil
		}
		var apiErr *jetstream.APIError
		known := errors.As(err, &apiErr)
		if known && i >= 2 {
			return nil, err
		}
		if !known && i == 2 {
			unknown(err)
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(err, ctx.Err())
		case <-clk.After(backoff.Duration):
		}
		if i >= 2 {
			backoff.Step()
		}
	}
}

// errInvocationGone: a Light item's invocation message is not in the
// stream any more (removed, expired) or its sequence holds another one.
var errInvocationGone = errors.New("the invocation's message is gone from the stream")

// readInvocation reads a Light item's invocation back from the stream (the
// payload, headers and attributes it does not hold in memory).
func (a *Activator) readInvocation(ctx context.Context, it *state.Item) (messages.Invocation, error) {
	inv := it.Inv
	m, err := a.cfg.Store.Stream.GetMsg(ctx, it.Seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return inv, fmt.Errorf("%w: %s/%s at sequence %d", errInvocationGone, inv.Namespace, inv.InvocationID, it.Seq)
	}
	if err != nil {
		return inv, fmt.Errorf("read invocation %s/%s at stream sequence %d: %w", inv.Namespace, inv.InvocationID, it.Seq, err)
	}
	var stored messages.Invocation
	if err := json.Unmarshal(m.Data, &stored); err != nil || stored.Namespace != inv.Namespace || stored.InvocationID != inv.InvocationID {
		return inv, fmt.Errorf("%w: sequence %d does not hold %s/%s", errInvocationGone, it.Seq, inv.Namespace, inv.InvocationID)
	}
	inv.Payload, inv.Headers, inv.Attributes = stored.Payload, stored.Headers, stored.Attributes
	return inv, nil
}

// sendCancel tells worker to stop attempt of invocation id.
func (a *Activator) sendCancel(ns, pool, worker, id string, attempt int) {
	b, err := json.Marshal(messages.Cancel{InvocationID: id, Attempt: attempt})
	if err == nil {
		err = a.cfg.NC.Publish(a.cfg.Store.Subjects.Cancel(ns, pool, worker), b)
	}
	if err != nil {
		a.cfg.Logger.Warn("send cancel", "invocation", id, "worker", worker, "err", err)
	}
}

// resultToken is a new attempt's ResultToken: 128 random bits.
func resultToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("result token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
