package ingress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/runplane/runplane/api"
	v1 "github.com/runplane/runplane/api/serverless/v1"
	"github.com/runplane/runplane/internal/httpjson"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/tracing"
	"github.com/runplane/runplane/queue/stream"
)

func (s *Server) handleInvoke(w http.ResponseWriter, r *http.Request, ns, poolName string, alias bool) {
	start := time.Now()
	// The caller is known already (Handler authenticates every route). The
	// path names the pool, and so may the alias's query: the caller is then
	// authorized before its body is read. An alias request that names its
	// pool only inside the body is read first, within AliasBodyBytes.
	where := "the path"
	if alias {
		q := r.URL.Query()
		ns, poolName, where = q.Get("namespace"), q.Get("serverlessRequestID"), "the query"
		if (ns == "" || poolName == "") && rawBody(r) {
			s.reject(w, http.StatusBadRequest, "a raw body on the seed alias needs query parameters namespace and serverlessRequestID (the pool's namespace and name)")
			return
		}
	}
	named := ns != "" && poolName != ""
	if named && !s.authorizeInvoke(w, r, ns, poolName) {
		return
	}
	limit := s.cfg.MaxBodyBytes
	if !named {
		limit = s.cfg.AliasBodyBytes
	}
	if rawBody(r) {
		limit = s.cfg.MaxPayloadBytes
	}
	// The body's bytes are counted before it is read, and given back once
	// the request holds no form of them: after the accept (below). One
	// that names no pool is nobody's to charge yet (its caller is not
	// authorized for any namespace, whatever its query says): the alias
	// share.
	holdNS := ns
	if !named {
		holdNS = ""
	}
	hold, ok := s.holdBody(w, r, holdNS, poolName, limit)
	if !ok {
		return
	}
	defer hold()
	var req v1.InvokeRequest
	if rawBody(r) {
		var ok bool
		if req, ok = s.decodeRaw(w, r); !ok {
			return
		}
	} else if err := decodeBody(http.MaxBytesReader(w, r.Body, limit), r.ContentLength, limit, &req); err != nil {
		var mbe *http.MaxBytesError
		var le *limitError
		switch {
		case errors.As(err, &le): // a body without a length past its budget
			s.tooMany(w, le)
		case errors.As(err, &mbe) && !named:
			s.reject(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("a seed-alias body that names its pool only inside it may have %d bytes (it is read before "+
				"the caller is authorized for the pool): name the pool in the query (?namespace=…&serverlessRequestID=…) to send up to %d bytes", limit, s.cfg.MaxBodyBytes))
		case errors.As(err, &mbe):
			s.reject(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes (a payload may have %d bytes, %s)",
				s.cfg.MaxBodyBytes, s.cfg.MaxPayloadBytes, mib(s.cfg.MaxPayloadBytes)))
		case s.bodyTimedOut(w, err): // answered: 408
		default:
			s.reject(w, http.StatusBadRequest, fmt.Sprintf("invalid JSON body: %v", err))
		}
		return
	}
	if n := messages.PayloadSize(req.ContentType, req.Payload); n > s.cfg.MaxPayloadBytes {
		s.tooLarge(w, "payload", n)
		return
	}
	if ns != "" && req.Namespace != "" && req.Namespace != ns {
		s.reject(w, http.StatusBadRequest, fmt.Sprintf("field namespace %q differs from the namespace %q in %s", req.Namespace, ns, where))
		return
	}
	if poolName != "" && req.ServerlessRequestID != "" && req.ServerlessRequestID != poolName {
		s.reject(w, http.StatusBadRequest, fmt.Sprintf("field serverlessRequestID %q differs from the pool %q in %s", req.ServerlessRequestID, poolName, where))
		return
	}
	if !named {
		ns, poolName = cmp.Or(ns, req.Namespace), cmp.Or(poolName, req.ServerlessRequestID)
		if ns == "" {
			s.reject(w, http.StatusBadRequest, "field namespace is required (the pool's namespace)")
			return
		}
		if poolName == "" {
			s.reject(w, http.StatusBadRequest, "field serverlessRequestID is required (the pool name)")
			return
		}
		if !s.authorizeInvoke(w, r, ns, poolName) {
			return
		}
	}
	r, span := s.traceAccept(w, r, ns, poolName, start)
	defer span.End()
	streamed := wantsStream(r, req)
	if streamed && req.Mode == "" {
		req.Mode = v1.ModeAsync
	}
	if err := s.validate(&req); err != nil {
		s.reject(w, http.StatusBadRequest, err.Error())
		return
	}
	pl, ok := s.cfg.Pools.Lookup(ns, poolName)
	if !ok {
		s.reject(w, http.StatusNotFound, unknownPool(ns, poolName))
		return
	}
	if len(pl.Conflict) > 0 {
		s.reject(w, http.StatusConflict, conflictMessage(pl))
		return
	}
	cb, err := s.callbackStatus(req.CallbackURL, pl.Policy.CallbackURL, req.CallbackEvents)
	if err != nil {
		s.reject(w, http.StatusBadRequest, err.Error())
		return
	}
	// The namespace's Object Store bucket, where its workers store results
	// too big for one message (made once per namespace and replica; the
	// NATS auth callout also makes it when it admits a worker). Without
	// one, only this namespace's big payloads and results fail.
	if _, err := s.cfg.Store.Objects.Ensure(r.Context(), ns); err != nil {
		s.cfg.Logger.Warn("object store bucket", "namespace", ns, "err", err)
	}
	// Likewise the namespace's chunks stream, where its workers relay
	// streamed answers: without one only this namespace's streamed
	// answers fail (and its streams answer 503 naming the limit).
	if _, err := s.cfg.Store.Chunks.Ensure(r.Context(), ns); err != nil {
		s.cfg.Logger.Warn("chunks stream", "namespace", ns, "err", err)
	}
	clientID := req.InvocationID != ""
	if !clientID {
		req.InvocationID = nuid.Next()
	}
	if err := poolTimeout(&req, pl.Policy.TimeoutSeconds, s.cfg.DefaultTimeoutSeconds); err != nil {
		s.reject(w, http.StatusBadRequest, err.Error())
		return
	}
	req.TTLSeconds = cmp.Or(req.TTLSeconds, s.cfg.DefaultTTLSeconds)
	ctx := r.Context()
	hash, err := requestHash(req)
	if err != nil {
		s.reject(w, http.StatusBadRequest, err.Error())
		return
	}
	inv := messages.Invocation{InvocationID: req.InvocationID, Namespace: ns, Pool: poolName, Mode: messages.Mode(req.Mode), ContentType: req.ContentType,
		Headers: req.Headers, Attributes: req.Attributes, Payload: req.Payload, TimeoutSeconds: req.TimeoutSeconds,
		TTLSeconds: req.TTLSeconds, AcceptedAt: time.Now().UTC(), MaxResultBytes: s.cfg.MaxPayloadBytes,
		ResultMsgMaxBytes: int64(s.cfg.Store.Config.ResultMaxMsgSize),
		MaxChunkBytes:     s.cfg.Store.Config.MaxChunkData(), MaxChunks: s.cfg.Store.Config.ChunksConfig.MaxPerInvocation}
	// One UID read stamps the Record and keys the callback's signature.
	uid, code, err := s.namespaceUID(ctx, ns)
	if err != nil {
		s.reject(w, code, err.Error())
		return
	}
	inv.NamespaceUID = uid
	if cb != nil {
		inv.CallbackURL = cb.URL
		inv.CallbackKeyID, inv.CallbackEvents = uid, cb.Events
	}
	// A sync caller registers before anything is published, so no result
	// can slip past it. Its reply token makes its fast-path reply subject
	// its own (onReply); a duplicate caller's token is not the one
	// published, so it waits on the Record.
	var ch chan messages.Record
	if req.Mode == v1.ModeSync {
		wt := waiter{pool: poolName}
		if s.replica != "" {
			if wt.token, err = replyToken(); err != nil {
				s.reject(w, http.StatusServiceUnavailable, err.Error())
				return
			}
			inv.ReplyTo = s.cfg.Store.Subjects.Reply(ns, poolName) + "." + s.replica + "." + inv.InvocationID + "." + wt.token
		}
		var done func()
		ch, done = s.addWaiter(stream.Key(ns, inv.InvocationID), wt)
		defer done()
	}

	if streamed {
		// The stream's slot before the invocation is accepted: a refused
		// stream must not leave behind an invocation its caller gave up.
		if le := s.openStream(ns, poolName); le != nil {
			s.tooMany(w, le)
			return
		}
		defer s.closeStream(ns)
	}
	ack, rec, err := s.accept(ctx, inv, hash, s.cfg.Limits.Backlog(pl.Policy), clientID)
	// The payload is stored (or refused): nothing reads it any more, and
	// with these two gone no form of the body is reachable (the payload
	// is a slice of the body's buffer; the encoded message died with its
	// call), so its bytes
	// go back to the budget now rather than after a sync wait or a stream
	// that may last minutes.
	req.Payload, inv.Payload = nil, nil
	hold()
	var le *limitError
	if errors.As(err, &le) {
		s.tooMany(w, le)
		return
	}
	var sf *storeFullError
	if errors.As(err, &sf) {
		s.cfg.Logger.Warn("refusing an invocation: store full", "why", sf.why)
		w.Header().Set("Retry-After", "5")
		s.reject(w, http.StatusServiceUnavailable, sf.Error())
		return
	}
	var ce *conflictError
	if errors.As(err, &ce) {
		s.reject(w, http.StatusConflict, ce.Error())
		return
	}
	if err != nil {
		s.cfg.Logger.Warn("accept invocation", "invocation", inv.InvocationID, "err", err)
		s.reject(w, http.StatusServiceUnavailable, fmt.Sprintf("could not enqueue invocation %s: %v", inv.InvocationID, err))
		return
	}
	if ack.Duplicate {
		s.m.duplicates.WithLabelValues(ns, poolName).Inc()
		if req.Mode == v1.ModeSync && !s.resultReadable(w, r, ns, poolName) {
			return
		}
	}
	s.m.accepted.WithLabelValues(ns, poolName, string(req.Mode)).Inc()
	if streamed {
		// A re-post answers with the existing invocation's output: as a
		// sync re-post, only for a caller who may also read it.
		if ack.Duplicate && req.Mode != v1.ModeSync && !s.resultReadable(w, r, ns, poolName) {
			return
		}
		s.serveSSE(w, r, rec, 0, start)
		return
	}
	if req.Mode == v1.ModeAsync {
		httpjson.Write(w, http.StatusAccepted, ack)
		return
	}
	if rec.State.Terminal() {
		s.writeRecord(w, ctx, http.StatusOK, rec)
		return
	}
	final, ok := s.wait(ctx, stream.Key(ns, inv.InvocationID), ch, time.Duration(req.TimeoutSeconds)*time.Second)
	s.m.syncLatency.WithLabelValues(ns, poolName).Observe(time.Since(start).Seconds())
	if !ok {
		httpjson.WriteProblem(w, http.StatusGatewayTimeout, InvocationProblem{Problem: httpjson.NewProblem(r, http.StatusGatewayTimeout,
			fmt.Sprintf("no result within timeoutSeconds=%d; poll GET /v1/namespaces/%s/invocations/%s", req.TimeoutSeconds, ns, inv.InvocationID)),
			InvocationID: inv.InvocationID, State: v1.State(final.State)})
		return
	}
	s.writeRecord(w, ctx, http.StatusOK, accepted(final, rec))
}

// accepted completes a final Record taken from a worker's fast-path reply
// (which carries the result only) with what the accept stored: the sync
// 200 shows what GET shows — mode and acceptedAt (updatedAt is the
// worker's finish time, not the Record write's).
func accepted(final, rec messages.Record) messages.Record {
	final.Mode = cmp.Or(final.Mode, rec.Mode)
	if final.AcceptedAt.IsZero() {
		final.AcceptedAt = rec.AcceptedAt
	}
	return final
}

type conflictError struct{ msg string }

// idTaken is the 409 of an ID the request may not use, whoever holds it
// (another pool of the namespace, the namespace's predecessor): the
// caller learns that the ID is taken, and nothing of its holder.
func idTaken(inv messages.Invocation) *conflictError {
	return &conflictError{fmt.Sprintf("invocationID %s cannot be used in namespace %q: use a new invocationID", inv.InvocationID, inv.Namespace)}
}

func (e *conflictError) Error() string { return e.msg }

// accept makes inv durable exactly once and returns the ack and the
// Record. hash is requestHash of the request (kept in the Record: a re-post
// must match it); poolMax bounds the pool's backlog (0: none); clientID: the
// caller chose the invocation ID, which may then be a re-post.
func (s *Server) accept(ctx context.Context, inv messages.Invocation, hash string, poolMax int, clientID bool) (v1.Ack, messages.Record, error) {
	st := s.cfg.Store
	ack := v1.Ack{InvocationID: inv.InvocationID, Namespace: inv.Namespace, Pool: inv.Pool}
	// The Record comes first: it outlives the duplicate window, so a
	// re-post after it finds the existing invocation. KV Create is the
	// check: a taken ID fails it, and only then is the Record read.
	key := stream.Key(inv.Namespace, inv.InvocationID)
	if le := s.reserve(inv.Namespace, inv.Pool, poolMax); le != nil {
		// A re-post of an accepted ID is answered even when the backlog is
		// full (an ID the ingress generated cannot be one).
		if !clientID {
			return ack, messages.Record{}, le
		}
		if rec, _, err := st.Get(ctx, key); err == nil {
			return s.duplicate(ctx, ack, rec, inv, hash)
		} else if !errors.Is(err, stream.ErrNotFound) {
			return ack, rec, err
		}
		return ack, messages.Record{}, le
	}
	var seq uint64 // queued at seq: counted until the activator's status covers it
	defer func() { s.release(inv.Namespace, inv.Pool, seq) }()
	if why := s.storeFull(ctx, inv.Namespace); why != "" {
		// A re-post of an accepted ID is still answered.
		if clientID {
			if rec, _, err := st.Get(ctx, key); err == nil {
				return s.duplicate(ctx, ack, rec, inv, hash)
			}
		}
		return ack, messages.Record{}, &storeFullError{why}
	}
	// The namespace's share of the stream and the bucket (its byte
	// budgets): a full share refuses this namespace only.
	// Charged at what the stream will store: the encoded message (whose
	// JSON may be larger than the payload), not the payload.
	b, inline, err := s.encodeInline(inv)
	if err != nil {
		return ack, messages.Record{}, err
	}
	size, err := messageBytes(inv, b, inline)
	if err != nil {
		return ack, messages.Record{}, err
	}
	unreserve, err := s.reserveBytes(inv, size)
	if err != nil {
		if clientID {
			if rec, _, gerr := st.Get(ctx, key); gerr == nil {
				return s.duplicate(ctx, ack, rec, inv, hash)
			}
		}
		return ack, messages.Record{}, err
	}
	// Accepted, the reservation holds until the watch delivers the Record.
	var accepted bool
	defer func() {
		if !accepted {
			unreserve()
		}
	}()
	rec := messages.Record{InvocationID: inv.InvocationID, Namespace: inv.Namespace, Pool: inv.Pool, Mode: inv.Mode, State: messages.StateQueued,
		Stream: st.Config.Stream, RequestHash: hash, AcceptedAt: inv.AcceptedAt, UpdatedAt: inv.AcceptedAt, NamespaceUID: inv.NamespaceUID,
		StreamBytes: size}
	if inv.CallbackURL != "" {
		rec.Callback = &messages.CallbackStatus{URL: inv.CallbackURL, KeyID: inv.CallbackKeyID, State: messages.CallbackPending, Events: inv.CallbackEvents}
		if slices.Contains(inv.CallbackEvents, messages.CallbackEventStart) {
			rec.Callback.Start = &messages.CallbackDelivery{State: messages.CallbackPending}
		}
	}
	rev, err := st.Create(ctx, rec)
	if errors.Is(err, stream.ErrExists) {
		// Posted before, or another request with this ID won the race.
		cur, _, gerr := st.Get(ctx, key)
		if gerr != nil {
			return ack, cur, gerr
		}
		return s.duplicate(ctx, ack, cur, inv, hash)
	} else if err != nil {
		return ack, rec, err
	}
	// The Record's sequence is filled in by the activator when it
	// dispatches: writing it here would cost two more KV round trips.
	if rec.Callback != nil {
		// The activator's copy of a Record it did not read would lack the
		// callback and overwrite it: it reads this one.
		rev = 0
	}
	if !inline {
		if b, err = s.encode(ctx, inv); err != nil {
			_ = st.Delete(context.WithoutCancel(ctx), key)
			return ack, rec, err
		}
	}
	pa, err := s.publish(ctx, inv, b, rev, hash)
	if err != nil {
		// Not accepted: free the ID so the caller can retry.
		_ = st.Delete(context.WithoutCancel(ctx), key)
		return ack, rec, err
	}
	if !pa.Duplicate {
		seq = pa.Sequence
		s.note(int(size))
	}
	rec.Sequence = pa.Sequence
	ack.Duplicate, ack.State, ack.AcceptedAt = pa.Duplicate, v1.StateQueued, inv.AcceptedAt
	accepted = true
	return ack, rec, nil
}

// messageOverhead estimates what an invocation message holds besides its
// payload (the storage guard's count between two reads).
const messageOverhead = stream.MessageOverhead

// publish stores inv, encoded as b, on invoke.<pool>; rev, when known, is
// the revision of the Record just created (stream.RevisionHeader) and hash
// its RequestHash.
func (s *Server) publish(ctx context.Context, inv messages.Invocation, b []byte, rev uint64, hash string) (*jetstream.PubAck, error) {
	msg := &nats.Msg{Subject: s.cfg.Store.Subjects.Invoke(inv.Namespace, inv.Pool), Data: b, Header: nats.Header{}}
	if rev != 0 {
		msg.Header.Set(stream.RevisionHeader, strconv.FormatUint(rev, 10))
		msg.Header.Set(stream.RequestHashHeader, hash)
	}
	tracing.ToNATS(ctx, msg.Header)
	pa, err := s.cfg.Store.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(messages.MsgID(inv.Namespace, inv.InvocationID)))
	if err != nil {
		return nil, fmt.Errorf("publish invocation %s: %w", inv.InvocationID, err)
	}
	return pa, nil
}

// duplicate answers a re-post of an existing invocation ID: the existing
// invocation's state when the request is the same (hash), 409 when not.
func (s *Server) duplicate(ctx context.Context, ack v1.Ack, rec messages.Record, inv messages.Invocation, hash string) (v1.Ack, messages.Record, error) {
	// A predecessor's Record (a namespace deleted and made again under
	// this name) is neither answered nor republished: its ID stays taken
	// until the Record expires (-record-ttl).
	if same, err := s.sameNamespace(ctx, rec); err != nil {
		return ack, messages.Record{}, err
	} else if !same {
		return ack, messages.Record{}, idTaken(inv)
	}
	// Another pool's invocation: its caller may not see that pool, so the
	// answer is the predecessor's, naming neither the pool nor anything of
	// the invocation.
	if rec.Pool != inv.Pool {
		return ack, messages.Record{}, idTaken(inv)
	}
	// A Record without a hash (written by an older ingress, or re-created
	// by the activator from the stored message after it expired) cannot be
	// compared: its state may be answered, but nothing may be published
	// for it (refusedRepublish).
	if rec.RequestHash != "" && rec.RequestHash != hash {
		return ack, rec, &conflictError{fmt.Sprintf("invocationID %s was accepted with another request: a re-post must carry the same payload, "+
			"headers, attributes and contentType (or use a new invocationID)", inv.InvocationID)}
	}
	if rec.State == messages.StateQueued && rec.Attempt == 0 {
		if err := refusedRepublish(rec, inv); err != nil {
			return ack, rec, err
		}
		// The first accepting replica may have died between the Record and
		// the publish, at any age of the Record: publish again, every time,
		// so a 202 always stands on a stored message. Within the duplicate
		// window the stream drops the copy (and answers the first one's
		// sequence), so at most one copy per window gets in; the activator
		// deletes one of an invocation it holds (or a finished one's), and
		// the queued Record's share counts room for it meanwhile (nsbytes).
		// The copy keeps the Record's acceptedAt: its ttlSeconds counts
		// from the first accept.
		inv.AcceptedAt = rec.AcceptedAt
		b, err := s.encode(ctx, inv)
		if err != nil {
			return ack, rec, err
		}
		pa, err := s.publish(ctx, inv, b, 0, "")
		if err != nil {
			return ack, rec, err
		}
		rec.Sequence = pa.Sequence
	}
	ack.Duplicate, ack.State, ack.AcceptedAt = true, v1.State(rec.State), rec.AcceptedAt
	return ack, rec, nil
}

// wait blocks until the invocation (Record key id) is terminal or timeout
// passes.
func (s *Server) wait(ctx context.Context, id string, ch chan messages.Record, timeout time.Duration) (messages.Record, bool) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	// Polling backs up the watch across NATS reconnects.
	poll := time.NewTicker(2 * time.Second)
	defer poll.Stop()
	var last messages.Record
	for {
		select {
		case r := <-ch:
			return r, true
		case <-poll.C:
			if r, _, err := s.cfg.Store.Get(ctx, id); err == nil {
				last = r
				if r.State.Terminal() {
					return r, true
				}
			}
		case <-timer.C:
			if r, _, err := s.cfg.Store.Get(context.WithoutCancel(ctx), id); err == nil {
				last = r
				if r.State.Terminal() {
					return r, true
				}
			}
			if last.State == "" {
				last.State = messages.StateQueued
			}
			return last, false
		case <-ctx.Done():
			return last, false
		}
	}
}

// poolTimeout applies the pool's runplane.io/timeout-seconds (limit, 0:
// unset) to req: the pool's workers get a grace period sized for it, so a
// longer execution is refused, and the default never exceeds it.
func poolTimeout(req *v1.InvokeRequest, limit, def int) error {
	if limit > 0 {
		if req.TimeoutSeconds > limit {
			return fmt.Errorf("field timeoutSeconds %d: above the pool's %s=%d", req.TimeoutSeconds, api.AnnotationTimeoutSeconds, limit)
		}
		def = min(def, limit)
	}
	req.TimeoutSeconds = cmp.Or(req.TimeoutSeconds, def)
	return nil
}
