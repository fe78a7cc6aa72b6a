package ingress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	v1 "github.com/runplane/runplane/api/serverless/v1"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/callback"
	"github.com/runplane/runplane/queue/stream"
)

// Streams (issue #20). A caller that asks for a stream (POST with Accept:
// text/event-stream or "stream": true; GET …/invocations/{id}/stream) gets
// server-sent events: the invocation's chunks as the worker relays them,
// read from its namespace's chunks stream with an ordered consumer, each
// with id: its sequence in that stream, then one result event with the
// terminal Record. Which chunks are sent, and the attempt, restart and gap
// events between them, is the follower's decision (ssefollow.go). The
// connection holds no state that another replica lacks: a client that
// lost it resumes on any replica with Last-Event-ID and gets the chunks
// after that one. Chunks are read with a small pull window, never the
// whole stream at once.
//
// Every event has an id: (the SSE rules: an EventSource reconnects with
// the last one it saw). The invocation, attempt, restart and gap events
// carry the id of the last chunk the client has (0: none), so a resume
// from them resumes after that chunk; the result event carries
// v1.ResultEventID, and a reconnect with it is answered 204 No Content, the
// one answer that makes an EventSource stop reconnecting (without it, a
// browser receives the result again every few seconds for ever).

// sseKeepalive is how often an idle stream gets a comment line, so
// proxies and load balancers do not cut it; it also re-reads the Record
// (the watch's backup across NATS reconnects).
const sseKeepalive = 10 * time.Second

// ssePullWindow bounds the chunks pulled ahead of the client per stream.
const ssePullWindow = 32

// wantsStream reports whether an invocation POST asks for a stream.
func wantsStream(r *http.Request, req v1.InvokeRequest) bool {
	if req.Stream {
		return true
	}
	for _, a := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(a)); err == nil && mt == "text/event-stream" {
			return true
		}
	}
	return false
}

// handleStream serves GET …/invocations/{id}/stream: readable by exactly
// whoever may GET the invocation (record's check, verb get).
func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) {
	ns, id, ok := invocationPath(w, r)
	if !ok {
		return
	}
	after, ended, err := lastEventID(r)
	if err != nil {
		problem(w, r, http.StatusBadRequest, err.Error())
		return
	}
	rec, ok := s.record(w, r, ns, id, VerbRead)
	if !ok {
		return
	}
	if ended {
		// The client has the result: the SSE spec's "stop reconnecting".
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if le := s.openStream(rec.Namespace, rec.Pool); le != nil {
		s.tooMany(w, le)
		return
	}
	defer s.closeStream(rec.Namespace)
	s.serveSSE(w, r, rec, after, time.Now())
}

// lastEventID is the chunk sequence to resume after, or ended when the
// client had the result event: the Last-Event-ID header (what an
// EventSource sends on reconnect) or the after query parameter.
func lastEventID(r *http.Request) (after uint64, ended bool, err error) {
	v := r.Header.Get("Last-Event-ID")
	name := "header Last-Event-ID"
	if v == "" {
		v, name = r.URL.Query().Get("after"), "query parameter after"
	}
	if v == "" {
		return 0, false, nil
	}
	if v == v1.ResultEventID {
		return 0, true, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n == math.MaxUint64 { // the next sequence must exist
		return 0, false, fmt.Errorf("%s %q: must be the id of an event of this stream (a decimal sequence, or %q)", name, v, v1.ResultEventID)
	}
	return n, false, nil
}

// serveSSE streams rec's chunks after stream sequence after, then its
// terminal Record; the caller holds one of the namespace's stream slots
// (openStream). start is when the request came (time to first chunk).
func (s *Server) serveSSE(w http.ResponseWriter, r *http.Request, rec messages.Record, after uint64, start time.Time) {
	ctx := r.Context()
	key := stream.Key(rec.Namespace, rec.InvocationID)
	// Registered before the Record is read again: no terminal update
	// can slip between the two.
	term, done := s.addWaiter(key, waiter{pool: rec.Pool})
	defer done()
	if cur, _, err := s.cfg.Store.Get(ctx, key); err == nil {
		rec = cur
	}
	chunkStream, err := s.cfg.Store.Chunks.Ensure(ctx, rec.Namespace)
	if err != nil {
		problem(w, r, http.StatusServiceUnavailable, fmt.Sprintf("read the chunks of invocation %s: %v", rec.InvocationID, err))
		return
	}
	subj := s.cfg.Store.Subjects
	filter := subj.InvocationChunks(rec.Namespace, rec.Pool, rec.InvocationID)
	occ := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}}
	if after > 0 {
		occ.DeliverPolicy, occ.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	cons, err := chunkStream.OrderedConsumer(ctx, occ)
	if err != nil {
		problem(w, r, http.StatusServiceUnavailable, fmt.Sprintf("read the chunks of invocation %s: %v", rec.InvocationID, err))
		return
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(ssePullWindow))
	if err != nil {
		problem(w, r, http.StatusServiceUnavailable, fmt.Sprintf("read the chunks of invocation %s: %v", rec.InvocationID, err))
		return
	}
	defer it.Stop()
	chunks := make(chan jetstream.Msg)
	go func() {
		defer close(chunks)
		for {
			m, err := it.Next()
			if err != nil {
				return // stopped
			}
			select {
			case chunks <- m:
			case <-ctx.Done():
				return
			}
		}
	}()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	h.Set("Runplane-Invocation-Id", rec.InvocationID)
	w.WriteHeader(http.StatusOK)
	sw := &eventWriter{w: w, rc: http.NewResponseController(w), had: after}
	open, _ := json.Marshal(v1.StreamOpening{InvocationID: rec.InvocationID, Namespace: rec.Namespace, Pool: rec.Pool, State: v1.State(rec.State)})
	if sw.event(v1.EventInvocation, sw.position(), open) != nil {
		return
	}
	s.sse.streams.Inc()
	defer s.sse.streams.Dec()

	f := &follower{known: after == 0}
	if after > 0 {
		// The chunk the client has: where it is, so a copy stored again by
		// a sidecar's retry is not sent twice, a rerun is told apart and
		// lost chunks are announced. One no longer retained leaves the
		// position unknown.
		if m, err := chunkStream.GetMsg(ctx, after); err == nil {
			c, ok := parseChunk(subj, m.Subject, m.Sequence, m.Header.Get(messages.ChunkAttemptHeader),
				m.Header.Get(messages.ChunkExecutionHeader), m.Header.Get(messages.ChunkSeqHeader))
			// Exactly this invocation's chunk subject (the namespace's
			// stream holds every invocation's): the worker named in it.
			ok = ok && m.Subject == subj.ChunkSubject(rec.Namespace, rec.Pool, c.worker, rec.InvocationID)
			if ok && resumable(rec, c) {
				f.resumeFrom(c)
			}
		}
	}
	last := after // the stream sequence of the last chunk read
	first := true
	var final *messages.Record
	if rec.State.Terminal() {
		final = &rec
	}
	var checks recordChecks
	keep := time.NewTicker(sseKeepalive)
	defer keep.Stop()
	var end uint64 // the last chunk's sequence, read once the Record is terminal
	for {
		if final != nil {
			// Every chunk is stored before the result that made the Record
			// terminal: once the last one is written, the stream is over.
			// It is read once (again only if that chunk is gone, see the
			// keepalive): a chunk published later (by a hostile worker of
			// the pool) does not keep the stream open.
			if end == 0 {
				var err error
				if end, err = s.lastChunk(ctx, chunkStream, *final); err != nil {
					s.cfg.Logger.Warn("stream: last chunk", "invocation", rec.InvocationID, "err", err)
					return // the client resumes
				}
			}
			if last >= end {
				if g, ok := f.end(*final); ok {
					if writeEvent(sw, g) != nil {
						return
					}
					s.sse.events.WithLabelValues(g.name).Inc()
				}
				s.writeResult(ctx, sw, *final)
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case m, ok := <-chunks:
			if !ok {
				return
			}
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			last = md.Sequence.Stream
			hd := m.Headers()
			c, ok := parseChunk(subj, m.Subject(), last, hd.Get(messages.ChunkAttemptHeader), hd.Get(messages.ChunkExecutionHeader), hd.Get(messages.ChunkSeqHeader))
			if !ok {
				continue
			}
			if final == nil && checks.need(rec, c, time.Now()) {
				// A newer attempt than the Record as read: the activator
				// records an attempt before it dispatches it, so a read now
				// says which worker holds it.
				if cur, _, err := s.cfg.Store.Get(ctx, key); err == nil {
					rec = cur
				}
			}
			deliver, events, drop := f.next(c, owner(rec, c.attempt))
			if !deliver {
				s.sse.dropped.WithLabelValues(drop).Inc()
			}
			for _, ev := range events {
				if writeEvent(sw, ev) != nil {
					return
				}
				s.sse.events.WithLabelValues(ev.name).Inc()
			}
			if !deliver {
				continue
			}
			if sw.event(v1.EventChunk, strconv.FormatUint(last, 10), m.Data()) != nil {
				return
			}
			sw.had = last
			s.sse.chunks.Inc()
			if first {
				first = false
				s.sse.firstChunk.Observe(time.Since(start).Seconds())
			}
		case r := <-term:
			if cur, _, err := s.cfg.Store.Get(ctx, key); err == nil && cur.State.Terminal() {
				r = cur // the Record, not a fast-path reply's part of it
			}
			final, rec = &r, r
		case <-keep.C:
			if sw.comment("keepalive") != nil {
				return
			}
			if final != nil && last < end {
				// The last chunk is gone (evicted or aged out) before it
				// was read: find the last one still stored, or end now.
				if _, err := chunkStream.GetMsg(ctx, end); errors.Is(err, jetstream.ErrMsgNotFound) {
					end = 0
				}
			}
			if cur, _, err := s.cfg.Store.Get(ctx, key); err == nil {
				rec = cur
				if cur.State.Terminal() {
					final = &cur
				}
			}
		}
	}
}

func writeEvent(sw *eventWriter, ev sseEvent) error {
	b, err := json.Marshal(ev.data)
	if err != nil {
		return err
	}
	return sw.event(ev.name, sw.position(), b)
}

// lastChunk is the stream sequence of the last chunk stored by any worker
// the final Record names for one of its attempts (0: none): the chunks
// after it, by those workers or any other, are never sent.
func (s *Server) lastChunk(ctx context.Context, st jetstream.Stream, final messages.Record) (uint64, error) {
	workers := map[string]bool{final.Worker: final.Worker != ""}
	for _, a := range final.Attempts {
		workers[a.Worker] = a.Worker != ""
	}
	var end uint64
	for w, ok := range workers {
		if !ok {
			continue
		}
		m, err := st.GetLastMsgForSubject(ctx, s.cfg.Store.Subjects.ChunkSubject(final.Namespace, final.Pool, w, final.InvocationID))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("last chunk of worker %s: %w", w, err)
		}
		end = max(end, m.Sequence)
	}
	return end, nil
}

// writeResult ends a stream with the terminal Record. A response body
// held by reference (a big non-streamed answer) is not inlined into the
// event: the client GETs the invocation for it.
func (s *Server) writeResult(ctx context.Context, sw *eventWriter, rec messages.Record) {
	if rec.ResponseBodyRef == nil {
		if full, err := s.resolve(ctx, rec); err == nil {
			rec = full
		}
	}
	rec.ResponseBodyRef = nil
	b, err := callback.Encode(callback.Invocation(rec))
	if err != nil {
		return
	}
	_ = sw.event(v1.EventResult, v1.ResultEventID, b)
}

// eventWriter writes server-sent events and flushes each.
type eventWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	// had is the sequence of the last chunk the client has (0: none): the
	// id of the events that are not chunks, so a resume from one of them
	// resumes after that chunk (and writes them again if still due).
	had uint64
}

func (e *eventWriter) position() string { return strconv.FormatUint(e.had, 10) }

func (e *eventWriter) event(name, id string, data []byte) error {
	var b strings.Builder
	b.WriteString("id: " + id + "\n")
	b.WriteString("event: " + name + "\n")
	// Every line of data is a data field ("\r\n", "\r" and "\n" all end
	// a line in SSE); the client joins them with "\n".
	text := strings.ReplaceAll(strings.ReplaceAll(string(data), "\r\n", "\n"), "\r", "\n")
	for line := range strings.SplitSeq(text, "\n") {
		b.WriteString("data: " + line + "\n")
	}
	b.WriteString("\n")
	return e.write(b.String())
}

func (e *eventWriter) comment(text string) error { return e.write(": " + text + "\n\n") }

// sseWriteTimeout bounds one write to a client: a client that stops
// reading is cut off instead of pinning its goroutines, consumer and
// pulled chunks for ever.
const sseWriteTimeout = 30 * time.Second

func (e *eventWriter) write(s string) error {
	// Not every ResponseWriter supports deadlines (tests' recorders): then
	// the server's own timeouts apply.
	_ = e.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	if _, err := e.w.Write([]byte(s)); err != nil {
		return err
	}
	return e.rc.Flush()
}

type sseMetrics struct {
	streams    prometheus.Gauge
	chunks     prometheus.Counter
	firstChunk prometheus.Histogram
	dropped    *prometheus.CounterVec
	events     *prometheus.CounterVec
}

func newSSEMetrics(r prometheus.Registerer) *sseMetrics {
	m := &sseMetrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "runplane_ingress_streams", Help: "Server-sent event streams open now."}),
		chunks:  prometheus.NewCounter(prometheus.CounterOpts{Name: "runplane_ingress_stream_chunks_total", Help: "Chunks written to server-sent event streams."}),
		firstChunk: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "runplane_ingress_stream_first_chunk_seconds",
			Help:    "Time from a stream request to its first chunk written (time to first byte of output).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 20)}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_ingress_stream_chunks_dropped_total",
			Help: "Stored chunks not sent to a stream's client, by reason: foreign (not from the worker the Record says holds the attempt), stale (an older attempt's, or a run given up for a rerun), duplicate."},
			[]string{"reason"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_ingress_stream_events_total",
			Help: "attempt, restart and gap events written to server-sent event streams."}, []string{"event"}),
	}
	// Every reason and event starts at 0: the first is then an increase,
	// and the dashboard shows 0 rather than no data.
	for _, d := range []string{dropForeign, dropStale, dropDuplicate} {
		m.dropped.WithLabelValues(d)
	}
	for _, e := range []string{v1.EventAttempt, v1.EventRestart, v1.EventGap} {
		m.events.WithLabelValues(e)
	}
	if r != nil {
		for _, c := range []prometheus.Collector{m.streams, m.chunks, m.firstChunk, m.dropped, m.events} {
			_ = r.Register(c)
		}
	}
	return m
}

const streamDescription = "Readable by whoever may get the invocation (RBAC get on pools/invocations of its pool). " +
	"Events: invocation (ID, pool, state), then one chunk per chunk the worker's framework streamed, each with id: its sequence, " +
	"and finally result with the terminal invocation and id: result. With the id of the last chunk sent (0: none) and JSON data: " +
	"attempt {attempt} when a retry starts its output over; restart {attempt} when the same attempt was run again from its start " +
	"(its worker restarted): the chunks after it are the new run's, from its first, and the earlier run's are not part of the answer; " +
	"gap {attempt, firstRetained, missing, reason} when chunks the client has not had are no longer retained (evicted by the namespace's " +
	"budget, chart queue.stream.chunks.maxBytes, or aged out) and will never come: firstRetained is the id of the next chunk sent. " +
	"Only the chunks of the worker the invocation names as holding their attempt are sent. " +
	"Header Last-Event-ID (or query parameter after) resumes after that chunk, on any ingress replica, while the chunks are retained " +
	"(chart queue.stream.chunks.maxAge); Last-Event-ID result (the client has the result) is answered 204 No Content, " +
	"which stops an EventSource from reconnecting. An idle stream gets a comment every 10s."
