// Package ingress is the queue service's HTTP API: it validates
// invocations, records them in the Records bucket (KV Create: the first
// writer of an invocation ID wins), publishes them durably on
// invoke.<pool> with the invocation ID as Nats-Msg-Id, and answers async
// callers with the JetStream ack and sync callers with the result. Sync
// callers wait on a watch of the Records bucket, so any ingress replica can
// answer any invocation, plus a core NATS reply inbox as a fast path.
// Ingress replicas hold no state of their own.
package ingress

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/internal/httpjson"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/queue/stream"
)

// Authorizer decides whether the caller of r may do req
// (callerauth.Gate): a *callerauth.Refusal is the caller's 401/403, any
// other error means the apiserver could not be asked (503).
type Authorizer interface {
	Check(r *http.Request, req callerauth.Request) (user.Info, error)
}

// Config configures a Server.
type Config struct {
	Store *stream.Store
	NC    *nats.Conn
	Pools pool.Source
	// Auth authorizes every /v1 request and the seed alias. Nil serves
	// everyone: only with InsecureNoAuth (benchmarks and tests of the
	// unauthenticated baseline).
	Auth           Authorizer
	InsecureNoAuth bool
	// MaxBodyBytes bounds a request body (default 4 MiB; 413 beyond).
	MaxBodyBytes int64
	// MaxBacklog bounds the queued invocations per pool (default 1000; 429
	// beyond).
	MaxBacklog int
	// DefaultTimeoutSeconds applies when timeoutSeconds is 0 (default 300);
	// MaxTimeoutSeconds bounds it (default 3600).
	DefaultTimeoutSeconds, MaxTimeoutSeconds int
	// DefaultTTLSeconds applies when ttlSeconds is 0 (default 600).
	DefaultTTLSeconds int
	// DisableReplyFastPath makes sync callers rely on the KV watch only.
	DisableReplyFastPath bool
	Logger               *slog.Logger
	Registerer           prometheus.Registerer
	Gatherer             prometheus.Gatherer
}

func (c Config) withDefaults() Config {
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, 4<<20)
	c.MaxBacklog = cmp.Or(c.MaxBacklog, 1000)
	c.DefaultTimeoutSeconds = cmp.Or(c.DefaultTimeoutSeconds, 300)
	c.MaxTimeoutSeconds = cmp.Or(c.MaxTimeoutSeconds, 3600)
	c.DefaultTTLSeconds = cmp.Or(c.DefaultTTLSeconds, 600)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

// DefaultNamespace is the namespace of a pool whose Source names none
// (a static pool list, as in make dev without a cluster).
const DefaultNamespace = "default"

// Server serves the ingress API.
type Server struct {
	cfg Config
	// replica is this replica's token in the sync reply subjects
	// (Subjects.Reply(ns, pool).<replica>.<invocation ID>); "" when the
	// reply fast path is off.
	replica string
	m       *ingressMetrics

	mu sync.Mutex
	// waiters: sync callers by Record key (stream.Key), each with its pool.
	waiters map[string]map[chan messages.Record]string
	status  map[string]stream.PoolStatus // by stream.PoolKey
	local   map[string][]uint64          // stream sequences accepted here, not yet in the pool's status (by stream.PoolKey)

	stop []func()
}

// New starts the watches a Server needs; Close stops them.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if cfg.Store == nil || cfg.NC == nil || cfg.Pools == nil {
		return nil, errors.New("ingress: Store, NC and Pools are required")
	}
	if cfg.Auth == nil && !cfg.InsecureNoAuth {
		return nil, errors.New("ingress: Auth is required (InsecureNoAuth serves unauthenticated callers)")
	}
	s := &Server{cfg: cfg, waiters: map[string]map[chan messages.Record]string{},
		status: map[string]stream.PoolStatus{}, local: map[string][]uint64{}, m: newIngressMetrics(cfg.Registerer)}
	rw, err := cfg.Store.Records.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("watch records: %w", err)
	}
	s.stop = append(s.stop, func() { _ = rw.Stop() })
	go s.watchRecords(rw)
	pw, err := cfg.Store.Pools.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("watch pool status: %w", err)
	}
	s.stop = append(s.stop, func() { _ = pw.Stop() })
	go s.watchPools(pw)
	if !cfg.DisableReplyFastPath {
		s.replica = nuid.Next()
		sub, err := cfg.NC.Subscribe(cfg.Store.Subjects.Reply("*", "*")+"."+s.replica+".>", s.onReply)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("subscribe reply inbox: %w", err)
		}
		s.stop = append(s.stop, func() { _ = sub.Unsubscribe() })
	}
	return s, nil
}

// Close stops the watches.
func (s *Server) Close() {
	for _, f := range s.stop {
		f()
	}
	s.stop = nil
}

func (s *Server) watchRecords(w jetstream.KeyWatcher) {
	for e := range w.Updates() {
		if e == nil || e.Operation() != jetstream.KeyValuePut || !s.waiting(e.Key()) {
			continue
		}
		r, err := stream.Decode(e.Value())
		if err != nil || !r.State.Terminal() {
			continue
		}
		s.notify(r, false)
	}
}

func (s *Server) watchPools(w jetstream.KeyWatcher) {
	for e := range w.Updates() {
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		var ps stream.PoolStatus
		if json.Unmarshal(e.Value(), &ps) != nil {
			continue
		}
		s.mu.Lock()
		s.status[e.Key()] = ps
		// Keep what the activator had not taken in when it wrote this.
		// (A status without InvokeSeq, from an older activator, covers all.)
		kept := s.local[e.Key()][:0]
		for _, q := range s.local[e.Key()] {
			if ps.InvokeSeq != 0 && q > ps.InvokeSeq {
				kept = append(kept, q)
			}
		}
		s.local[e.Key()] = kept
		s.mu.Unlock()
	}
}

// onReply takes a worker's sync answer. The namespace, pool and invocation
// come from the subject (reply.<ns>.<pool>.<replica>.<id>), which NATS
// permissions tie to the worker's own pool, never from the body: a worker
// cannot answer another pool's caller.
func (s *Server) onReply(m *nats.Msg) {
	tail, ok := strings.CutPrefix(m.Subject, s.cfg.Store.Subjects.Prefix+".reply.")
	parts := strings.Split(tail, ".")
	if !ok || len(parts) != 4 || parts[2] != s.replica {
		return
	}
	ns, poolName, id := parts[0], parts[1], parts[3]
	var res messages.Result
	if json.Unmarshal(m.Data, &res) != nil || res.InvocationID != id || !res.State.Terminal() {
		return
	}
	s.notify(messages.Record{InvocationID: id, Namespace: ns, Pool: poolName, State: res.State, Worker: res.Worker,
		Attempt: res.Attempt, Response: res.Response, Error: res.Error, UpdatedAt: res.FinishedAt}, true)
}

// waiting reports whether a sync caller here waits on invocation id (the
// watch sees every Record update; most need no decoding).
func (s *Server) waiting(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters[id]) > 0
}

// notify hands r to the sync callers waiting on it; fromReply: r came
// from a worker's reply, and only callers of r's pool take it.
func (s *Server) notify(r messages.Record, fromReply bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch, poolName := range s.waiters[stream.Key(r.Namespace, r.InvocationID)] {
		if fromReply && poolName != r.Pool {
			continue
		}
		select {
		case ch <- r:
		default:
		}
	}
}

func (s *Server) addWaiter(id, poolName string) (chan messages.Record, func()) {
	ch := make(chan messages.Record, 1)
	s.mu.Lock()
	if s.waiters[id] == nil {
		s.waiters[id] = map[chan messages.Record]string{}
	}
	s.waiters[id][ch] = poolName
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.waiters[id], ch)
		if len(s.waiters[id]) == 0 {
			delete(s.waiters, id)
		}
		s.mu.Unlock()
	}
}

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/namespaces/{ns}/pools/{pool}/invocations", func(w http.ResponseWriter, r *http.Request) {
		s.handleInvoke(w, r, r.PathValue("ns"), r.PathValue("pool"), false)
	})
	mux.HandleFunc("POST /api/v1/serverless/invocations", func(w http.ResponseWriter, r *http.Request) {
		s.handleInvoke(w, r, "", "", true)
	})
	mux.HandleFunc("GET /v1/namespaces/{ns}/invocations/{id}", s.handleGet)
	mux.HandleFunc("POST /v1/namespaces/{ns}/invocations/{id}/cancel", s.handleCancel)
	mux.HandleFunc("GET /v1/namespaces/{ns}/pools/{pool}", s.handlePool)
	// The routes before pools were namespaced: a pointer to the new ones.
	for _, old := range []string{"/v1/pools/", "/v1/invocations/"} {
		mux.HandleFunc(old, func(w http.ResponseWriter, r *http.Request) {
			httpjson.Error(w, http.StatusNotFound, fmt.Sprintf("no route for %s %s: pools and invocations are addressed within their namespace, "+
				"/v1/namespaces/{namespace}/pools/{pool}[/invocations] and /v1/namespaces/{namespace}/invocations/{id}[/cancel]", r.Method, r.URL.Path))
		})
	}
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(OpenAPI))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		httpjson.Write(w, 200, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case !s.cfg.NC.IsConnected():
			httpjson.Error(w, http.StatusServiceUnavailable, "NATS is not connected")
		case !s.cfg.Pools.Synced():
			httpjson.Error(w, http.StatusServiceUnavailable, "pool list not synced")
		default:
			httpjson.Write(w, 200, map[string]string{"status": "ready"})
		}
	})
	if s.cfg.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpjson.Error(w, http.StatusNotFound, fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// InvokeRequest is the body of POST
// /v1/namespaces/{ns}/pools/{pool}/invocations (and of the seed alias, which
// names the namespace in namespace and the pool in serverlessRequestID).
type InvokeRequest struct {
	Mode                messages.Mode     `json:"mode"`
	Namespace           string            `json:"namespace,omitempty"`
	InvocationID        string            `json:"invocationID,omitempty"`
	ServerlessRequestID string            `json:"serverlessRequestID,omitempty"`
	Payload             json.RawMessage   `json:"payload,omitempty"`
	Headers             map[string]string `json:"headers,omitempty"`
	Attributes          map[string]string `json:"attributes,omitempty"`
	ContentType         string            `json:"contentType,omitempty"`
	TimeoutSeconds      int               `json:"timeoutSeconds,omitempty"`
	TTLSeconds          int               `json:"ttlSeconds,omitempty"`
}

// Subjects are the subjects of an invocation's pool, as in the seed ack.
type Subjects struct {
	Invoke  string `json:"invoke"`
	Result  string `json:"result"`
	Metrics string `json:"metrics"`
}

// Ack is the answer to an accepted async invocation (202).
type Ack struct {
	InvocationID string         `json:"invocationID"`
	Namespace    string         `json:"namespace"`
	Pool         string         `json:"pool"`
	Stream       string         `json:"stream"`
	Sequence     uint64         `json:"sequence"`
	Duplicate    bool           `json:"duplicate"`
	State        messages.State `json:"state"`
	Subjects     Subjects       `json:"subjects"`
	AcceptedAt   time.Time      `json:"acceptedAt"`
}

// idPattern: usable as a KV key and a Nats-Msg-Id. No '.': derived
// message IDs append ".<attempt>", which must not collide with another
// invocation's ID in the stream's duplicate window.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_=-]{1,128}$`)

func (s *Server) validate(req *InvokeRequest) error {
	switch req.Mode {
	case messages.ModeSync, messages.ModeAsync:
	case "":
		return errors.New("field mode is required: sync or async")
	default:
		return fmt.Errorf("field mode %q: must be sync or async", req.Mode)
	}
	if req.InvocationID != "" && !idPattern.MatchString(req.InvocationID) {
		return fmt.Errorf("field invocationID %q: 1-128 characters of A-Z a-z 0-9 _ = -", req.InvocationID)
	}
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > s.cfg.MaxTimeoutSeconds {
		return fmt.Errorf("field timeoutSeconds %d: must be between 0 (default %d) and %d", req.TimeoutSeconds, s.cfg.DefaultTimeoutSeconds, s.cfg.MaxTimeoutSeconds)
	}
	if req.TTLSeconds < 0 {
		return fmt.Errorf("field ttlSeconds %d: must be >= 0 (0: default %d)", req.TTLSeconds, s.cfg.DefaultTTLSeconds)
	}
	if len(req.Payload) > 0 && !json.Valid(req.Payload) {
		return errors.New("field payload: must be valid JSON")
	}
	return nil
}

func (s *Server) handleInvoke(w http.ResponseWriter, r *http.Request, ns, poolName string, alias bool) {
	start := time.Now()
	// The path names the pool: the caller is checked before its body is read.
	if !alias && !s.authorizeInvoke(w, r, ns, poolName) {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	var req InvokeRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.reject(w, poolName, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", s.cfg.MaxBodyBytes))
			return
		}
		s.reject(w, poolName, http.StatusBadRequest, fmt.Sprintf("invalid JSON body: %v", err))
		return
	}
	if alias {
		poolName, ns = req.ServerlessRequestID, req.Namespace
		if ns == "" {
			s.reject(w, poolName, http.StatusBadRequest, "field namespace is required (the pool's namespace)")
			return
		}
		if poolName == "" {
			s.reject(w, poolName, http.StatusBadRequest, "field serverlessRequestID is required (the pool name)")
			return
		}
	} else {
		if req.ServerlessRequestID != "" && req.ServerlessRequestID != poolName {
			s.reject(w, poolName, http.StatusBadRequest, fmt.Sprintf("field serverlessRequestID %q differs from the pool %q in the path", req.ServerlessRequestID, poolName))
			return
		}
		if req.Namespace != "" && req.Namespace != ns {
			s.reject(w, poolName, http.StatusBadRequest, fmt.Sprintf("field namespace %q differs from the namespace %q in the path", req.Namespace, ns))
			return
		}
	}
	if alias && !s.authorizeInvoke(w, r, ns, poolName) {
		return
	}
	if err := s.validate(&req); err != nil {
		s.reject(w, poolName, http.StatusBadRequest, err.Error())
		return
	}
	pl, ok := s.cfg.Pools.Lookup(ns, poolName)
	if !ok {
		s.reject(w, poolName, http.StatusNotFound, unknownPool(ns, poolName))
		return
	}
	if len(pl.Conflict) > 0 {
		s.reject(w, poolName, http.StatusConflict, conflictMessage(pl))
		return
	}
	if req.InvocationID == "" {
		req.InvocationID = nuid.Next()
	}
	req.TimeoutSeconds = cmp.Or(req.TimeoutSeconds, s.cfg.DefaultTimeoutSeconds)
	req.TTLSeconds = cmp.Or(req.TTLSeconds, s.cfg.DefaultTTLSeconds)
	ctx := r.Context()
	inv := messages.Invocation{InvocationID: req.InvocationID, Namespace: ns, Pool: poolName, Mode: req.Mode, ContentType: req.ContentType,
		Headers: req.Headers, Attributes: req.Attributes, Payload: req.Payload, TimeoutSeconds: req.TimeoutSeconds,
		TTLSeconds: req.TTLSeconds, AcceptedAt: time.Now().UTC()}
	if req.Mode == messages.ModeSync && s.replica != "" {
		inv.ReplyTo = s.cfg.Store.Subjects.Reply(ns, poolName) + "." + s.replica + "." + inv.InvocationID
	}
	// A sync caller registers before anything is published, so no result
	// can slip past it.
	var ch chan messages.Record
	if req.Mode == messages.ModeSync {
		var done func()
		ch, done = s.addWaiter(stream.Key(ns, inv.InvocationID), poolName)
		defer done()
	}

	ack, rec, err := s.accept(ctx, inv)
	if errors.Is(err, errBacklog) {
		w.Header().Set("Retry-After", strconv.Itoa(s.retryAfter(ns, poolName)))
		s.reject(w, poolName, http.StatusTooManyRequests, fmt.Sprintf("pool %q backlog is full (%d queued)", poolName, s.cfg.MaxBacklog))
		return
	}
	var ce *conflictError
	if errors.As(err, &ce) {
		s.reject(w, poolName, http.StatusConflict, ce.Error())
		return
	}
	if err != nil {
		s.cfg.Logger.Warn("accept invocation", "invocation", inv.InvocationID, "err", err)
		s.reject(w, poolName, http.StatusServiceUnavailable, fmt.Sprintf("could not enqueue invocation %s: %v", inv.InvocationID, err))
		return
	}
	if ack.Duplicate {
		s.m.duplicates.WithLabelValues(poolName).Inc()
		if req.Mode == messages.ModeSync && !s.resultReadable(w, r, ns, poolName) {
			return
		}
	}
	s.m.accepted.WithLabelValues(poolName, string(req.Mode)).Inc()
	if req.Mode == messages.ModeAsync {
		httpjson.Write(w, http.StatusAccepted, ack)
		return
	}
	if rec.State.Terminal() {
		httpjson.Write(w, http.StatusOK, rec)
		return
	}
	final, ok := s.wait(ctx, stream.Key(ns, inv.InvocationID), ch, time.Duration(req.TimeoutSeconds)*time.Second)
	s.m.syncLatency.WithLabelValues(poolName).Observe(time.Since(start).Seconds())
	if !ok {
		httpjson.Write(w, http.StatusGatewayTimeout, map[string]any{
			"error":        fmt.Sprintf("no result within timeoutSeconds=%d; poll GET /v1/namespaces/%s/invocations/%s", req.TimeoutSeconds, ns, inv.InvocationID),
			"invocationID": inv.InvocationID, "state": final.State,
		})
		return
	}
	httpjson.Write(w, http.StatusOK, final)
}

var errBacklog = errors.New("backlog full")

type conflictError struct{ msg string }

func (e *conflictError) Error() string { return e.msg }

// accept makes inv durable exactly once and returns the ack and the Record.
func (s *Server) accept(ctx context.Context, inv messages.Invocation) (Ack, messages.Record, error) {
	st := s.cfg.Store
	ack := Ack{InvocationID: inv.InvocationID, Namespace: inv.Namespace, Pool: inv.Pool, Stream: st.Config.Stream, Subjects: Subjects{
		Invoke: st.Subjects.Invoke(inv.Namespace, inv.Pool), Result: st.Subjects.Result(inv.Namespace, inv.Pool), Metrics: st.Subjects.Metrics(inv.Namespace, inv.Pool)}}
	// The Record comes first: it outlives the duplicate window, so a
	// re-post after it finds the existing invocation. KV Create is the
	// check: a taken ID fails it, and only then is the Record read.
	key := stream.Key(inv.Namespace, inv.InvocationID)
	if s.backlog(inv.Namespace, inv.Pool) >= s.cfg.MaxBacklog {
		// A re-post of an accepted ID is answered even when the pool is full.
		if rec, _, err := st.Get(ctx, key); err == nil {
			return s.duplicate(ctx, ack, rec, inv)
		} else if !errors.Is(err, stream.ErrNotFound) {
			return ack, rec, err
		}
		return ack, messages.Record{}, errBacklog
	}
	rec := messages.Record{InvocationID: inv.InvocationID, Namespace: inv.Namespace, Pool: inv.Pool, Mode: inv.Mode, State: messages.StateQueued,
		Stream: st.Config.Stream, AcceptedAt: inv.AcceptedAt, UpdatedAt: inv.AcceptedAt}
	rev, err := st.Create(ctx, rec)
	if errors.Is(err, stream.ErrExists) {
		// Posted before, or another request with this ID won the race.
		cur, _, gerr := st.Get(ctx, key)
		if gerr != nil {
			return ack, cur, gerr
		}
		return s.duplicate(ctx, ack, cur, inv)
	} else if err != nil {
		return ack, rec, err
	}
	// The Record's sequence is filled in by the activator when it
	// dispatches: writing it here would cost two more KV round trips.
	pa, err := s.publish(ctx, inv, rev)
	if err != nil {
		// Not accepted: free the ID so the caller can retry.
		_ = st.Delete(context.WithoutCancel(ctx), key)
		return ack, rec, err
	}
	s.mu.Lock()
	if !pa.Duplicate {
		pk := stream.PoolKey(inv.Namespace, inv.Pool)
		s.local[pk] = append(s.local[pk], pa.Sequence)
	}
	s.mu.Unlock()
	rec.Sequence = pa.Sequence
	ack.Sequence, ack.Duplicate, ack.State, ack.AcceptedAt = pa.Sequence, pa.Duplicate, messages.StateQueued, inv.AcceptedAt
	return ack, rec, nil
}

// publish stores inv on invoke.<pool>; rev, when known, is the revision of
// the Record just created (stream.RevisionHeader).
func (s *Server) publish(ctx context.Context, inv messages.Invocation, rev uint64) (*jetstream.PubAck, error) {
	b, err := json.Marshal(inv)
	if err != nil {
		return nil, fmt.Errorf("encode invocation: %w", err)
	}
	msg := &nats.Msg{Subject: s.cfg.Store.Subjects.Invoke(inv.Namespace, inv.Pool), Data: b, Header: nats.Header{}}
	if rev != 0 {
		msg.Header.Set(stream.RevisionHeader, strconv.FormatUint(rev, 10))
	}
	pa, err := s.cfg.Store.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(messages.MsgID(inv.Namespace, inv.InvocationID)))
	if err != nil {
		return nil, fmt.Errorf("publish invocation %s: %w", inv.InvocationID, err)
	}
	return pa, nil
}

// duplicate answers a re-post of an existing invocation ID.
func (s *Server) duplicate(ctx context.Context, ack Ack, rec messages.Record, inv messages.Invocation) (Ack, messages.Record, error) {
	if rec.Pool != inv.Pool {
		return ack, rec, &conflictError{fmt.Sprintf("invocationID %s already belongs to pool %q of namespace %q", inv.InvocationID, rec.Pool, rec.Namespace)}
	}
	if rec.State == messages.StateQueued && rec.Attempt == 0 && time.Since(rec.AcceptedAt) > 5*time.Second {
		// The first accepting replica may have died between the Record and
		// the publish: publish again. Within the duplicate window the stream
		// drops the copy; after it the activator does (it knows the ID, or
		// its dispatch compare-and-set on the Record refuses it).
		pa, err := s.publish(ctx, inv, 0)
		if err != nil {
			return ack, rec, err
		}
		rec.Sequence = pa.Sequence
	}
	ack.Sequence, ack.Duplicate, ack.State, ack.AcceptedAt = rec.Sequence, true, rec.State, rec.AcceptedAt
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

func (s *Server) backlog(ns, poolName string) int {
	pk := stream.PoolKey(ns, poolName)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status[pk].Backlog + len(s.local[pk])
}

func (s *Server) retryAfter(ns, poolName string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status[stream.PoolKey(ns, poolName)].Capacity > 0 {
		return 1
	}
	return 5
}

// invocationPath reads and checks {ns} and {id}; it answers 400 itself.
func invocationPath(w http.ResponseWriter, r *http.Request) (ns, id string, ok bool) {
	ns, id = r.PathValue("ns"), r.PathValue("id")
	if err := messages.ValidateToken("namespace", ns); err != nil {
		httpjson.Error(w, http.StatusBadRequest, err.Error())
		return ns, id, false
	}
	if !idPattern.MatchString(id) {
		httpjson.Error(w, http.StatusBadRequest, fmt.Sprintf("invocation ID %q: 1-128 characters of A-Z a-z 0-9 _ = -", id))
		return ns, id, false
	}
	return ns, id, true
}

func notFound(w http.ResponseWriter, ns, id string) {
	httpjson.Error(w, http.StatusNotFound, fmt.Sprintf("invocation %q not found in namespace %q", id, ns))
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	ns, id, ok := invocationPath(w, r)
	if !ok {
		return
	}
	rec, ok := s.record(w, r, ns, id, VerbRead)
	if !ok {
		return
	}
	httpjson.Write(w, http.StatusOK, rec)
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	ns, id, ok := invocationPath(w, r)
	if !ok {
		return
	}
	if _, ok := s.record(w, r, ns, id, VerbCancel); !ok {
		return
	}
	var before messages.Record
	rec, changed, err := s.cfg.Store.Update(r.Context(), stream.Key(ns, id), func(rec *messages.Record) bool {
		before = *rec
		if rec.State.Terminal() {
			return false
		}
		rec.State = messages.StateCancelled
		rec.Error = "cancelled by request"
		return true
	})
	if errors.Is(err, stream.ErrNotFound) {
		notFound(w, ns, id)
		return
	}
	if err != nil {
		httpjson.Error(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if !changed {
		httpjson.Write(w, http.StatusConflict, map[string]any{"error": fmt.Sprintf("invocation %s is already %s", id, rec.State), "invocationID": id, "state": rec.State})
		return
	}
	if (before.State == messages.StateDispatched || before.State == messages.StateRunning) && before.Worker != "" {
		// The worker is told; its late result cannot overwrite cancelled.
		b, _ := json.Marshal(messages.Cancel{InvocationID: id, Attempt: before.Attempt})
		if err := s.cfg.NC.Publish(s.cfg.Store.Subjects.Cancel(before.Namespace, before.Pool, before.Worker), b); err != nil {
			s.cfg.Logger.Warn("send cancel", "invocation", id, "err", err)
		}
	}
	httpjson.Write(w, http.StatusOK, rec)
}

// PoolInfo is the answer to GET /v1/namespaces/{ns}/pools/{pool}. A pool
// claimed by several Deployments of its namespace has Conflict set (and
// serves nothing: invocations get 409 until all but one are removed).
type PoolInfo struct {
	pool.Pool
	Status *stream.PoolStatus `json:"status,omitempty"`
}

func (s *Server) handlePool(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("pool")
	if err := errors.Join(messages.ValidateToken("namespace", ns), messages.ValidateToken("pool", name)); err != nil {
		httpjson.Error(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.allowed(w, r, callerauth.Request{Verb: VerbRead, Namespace: ns, Pool: name}) {
		return
	}
	p, ok := s.cfg.Pools.Lookup(ns, name)
	if !ok {
		httpjson.Error(w, http.StatusNotFound, unknownPool(ns, name))
		return
	}
	info := PoolInfo{Pool: p}
	if e, err := s.cfg.Store.Pools.Get(r.Context(), stream.PoolKey(ns, name)); err == nil {
		var ps stream.PoolStatus
		if json.Unmarshal(e.Value(), &ps) == nil {
			info.Status = &ps
		}
	}
	httpjson.Write(w, http.StatusOK, info)
}

func unknownPool(ns, name string) string {
	return fmt.Sprintf("unknown pool %q in namespace %q: no Deployment of the namespace is labelled runplane.io/pool=%s", name, ns, name)
}

func conflictMessage(p pool.Pool) string {
	return fmt.Sprintf("pool %q of namespace %q is claimed by %d Deployments (%s): it serves nothing until the runplane.io/pool label is removed from all but one",
		p.Name, p.Namespace, len(p.Conflict), strings.Join(p.Conflict, ", "))
}

func (s *Server) reject(w http.ResponseWriter, poolName string, code int, msg string) {
	s.m.rejected.WithLabelValues(strconv.Itoa(code)).Inc()
	httpjson.Error(w, code, msg)
	_ = poolName
}

type ingressMetrics struct {
	accepted, duplicates, rejected *prometheus.CounterVec
	syncLatency                    *prometheus.HistogramVec
}

func newIngressMetrics(r prometheus.Registerer) *ingressMetrics {
	m := &ingressMetrics{
		accepted:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_ingress_invocations_total", Help: "Invocations accepted (including duplicates)."}, []string{"pool", "mode"}),
		duplicates:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_ingress_duplicates_total", Help: "Re-posted invocation IDs."}, []string{"pool"}),
		rejected:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_ingress_rejected_total", Help: "Rejected requests by HTTP status."}, []string{"code"}),
		syncLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "runplane_ingress_sync_seconds", Help: "Sync invocation latency.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 20)}, []string{"pool"}),
	}
	if r != nil {
		for _, c := range []prometheus.Collector{m.accepted, m.duplicates, m.rejected, m.syncLatency} {
			_ = r.Register(c)
		}
	}
	return m
}
