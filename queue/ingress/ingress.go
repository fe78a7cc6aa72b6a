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
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/utils/clock"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/objects"
	"github.com/runplane/runplane/internal/rawjson"
	"github.com/runplane/runplane/internal/tracing"
	"github.com/runplane/runplane/queue/callback"
	"github.com/runplane/runplane/queue/ingress/internal/nsbytes"
	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/queue/stream"
)

// Authorizer tells who the caller of r is and whether it may do req
// (callerauth.Gate): a *refusal.Error is the caller's 401/403/429,
// any other error means the apiserver could not be asked (503).
type Authorizer interface {
	// Authenticate is the first thing every route does with a request:
	// nothing of its body is read before it.
	Authenticate(r *http.Request) (user.Info, error)
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
	// MaxPayloadBytes bounds a payload and a response body (default
	// objects.DefaultMaxPayloadBytes, 64 MiB; 413 beyond): JSON counts its
	// text, binary content its decoded bytes. What does not fit in one NATS
	// message travels through the namespace's Object Store bucket.
	MaxPayloadBytes int64
	// MaxBodyBytes bounds a JSON request body (default MaxPayloadBytes ×
	// 4/3 + 1 MiB: a binary payload at the limit in base64, plus the
	// envelope; 413 beyond).
	MaxBodyBytes int64
	// AliasBodyBytes bounds the body of a seed-alias request that names
	// its pool only inside the body (default 256 KiB; 413 beyond): it is
	// read before its caller is authorized for the pool. A request that
	// names namespace and serverlessRequestID in the query is authorized
	// first and may send MaxBodyBytes.
	AliasBodyBytes int64
	// HTTP bounds what a connection may hold (HTTPServer).
	HTTP HTTPLimits
	// Limits bound the queued invocations per pool (runplane.io/max-backlog
	// or Limits.PoolMaxBacklog) and per namespace (NamespaceMaxBacklog):
	// 429 beyond. The in-flight limits are the activator's.
	Limits pool.Limits
	// DefaultTimeoutSeconds applies when timeoutSeconds is 0 (default 300);
	// MaxTimeoutSeconds bounds it (default 3600).
	DefaultTimeoutSeconds, MaxTimeoutSeconds int
	// DefaultTTLSeconds applies when ttlSeconds is 0 (default 600);
	// MaxTTLSeconds bounds it (default 86400; keep it below the Records'
	// TTL and the stream's max age).
	DefaultTTLSeconds, MaxTTLSeconds int
	// Callbacks turns on completion callbacks (nil: off).
	Callbacks *CallbackConfig
	// Namespaces tells the namespaces' UIDs: every new Record is stamped
	// with its namespace's, and a Record whose UID is not the namespace's
	// current one is not found (a namespace made again under the name of a
	// deleted one cannot read its predecessor's invocations). The same UID
	// keys the invocation's callback signature. Default (nil):
	// callback.NoNamespaces, no UIDs (without Kubernetes).
	Namespaces callback.Namespaces
	// DisableReplyFastPath makes sync callers rely on the KV watch only.
	DisableReplyFastPath bool
	Logger               *slog.Logger
	Registerer           prometheus.Registerer

	// TracerProvider records the ingress's spans (nil: none; a caller's
	// trace context is still propagated: trace.go).
	TracerProvider trace.TracerProvider
}

func (c Config) withDefaults() Config {
	c.MaxPayloadBytes = cmp.Or(c.MaxPayloadBytes, objects.DefaultMaxPayloadBytes)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, BodyLimit(c.MaxPayloadBytes))
	c.AliasBodyBytes = min(cmp.Or(c.AliasBodyBytes, DefaultAliasBodyBytes), c.MaxBodyBytes)
	c.HTTP = c.HTTP.withDefaults()
	c.Limits = c.Limits.WithDefaults()
	c.DefaultTimeoutSeconds = cmp.Or(c.DefaultTimeoutSeconds, 300)
	c.MaxTimeoutSeconds = cmp.Or(c.MaxTimeoutSeconds, 3600)
	c.DefaultTTLSeconds = cmp.Or(c.DefaultTTLSeconds, 600)
	c.MaxTTLSeconds = cmp.Or(c.MaxTTLSeconds, 86400)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.Namespaces == nil {
		c.Namespaces = callback.NoNamespaces{}
	}
	return c
}

// BodyLimit is the default MaxBodyBytes for payloads of up to
// maxPayload bytes: a binary payload at the limit in base64, plus the
// envelope.
func BodyLimit(maxPayload int64) int64 { return maxPayload/3*4 + 4 + 1<<20 }

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
	sse     *sseMetrics
	// spec is the OpenAPI document served at /openapi.json (SpecJSON).
	spec []byte
	// tracer: the ingress's spans (trace.go).
	tracer tracing.Tracer

	mu sync.Mutex
	// waiters: sync callers by Record key (stream.Key).
	waiters map[string]map[chan messages.Record]waiter
	// counts: each pool's backlog (by stream.PoolKey), nsBacklog their sum
	// per namespace (limits.go).
	counts    map[string]*poolCount
	nsBacklog map[string]int
	// nsStreams: the result streams open per namespace (openStream).
	nsStreams map[string]int
	// bodies: the request-body bytes held, per namespace and in all
	// (bodybudget.go).
	bodies *bodyBudget
	// guard: whether the bounded store has room for new work.
	guard storeGuard
	// usage: each namespace's share of the stream and the Records bucket,
	// counted from the Records watch (nil: no byte budget is set and the
	// store is unbounded);
	// watched: the watch has delivered every stored Record.
	usage   *nsbytes.Usage
	watched atomic.Bool

	stop []func()
}

// New starts the watches a Server needs; Close stops them.
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if cfg.Store == nil || cfg.NC == nil || cfg.Pools == nil {
		return nil, errors.New("ingress: Store, NC and Pools are required")
	}
	if n := cfg.Limits.NamespaceMaxBodyBytes; n > 0 && n < max(cfg.MaxBodyBytes, cfg.MaxPayloadBytes) {
		return nil, fmt.Errorf("ingress: the namespace body budget (Limits.NamespaceMaxBodyBytes, %d) is below the largest request body (%d): no request that large could be read", n, max(cfg.MaxBodyBytes, cfg.MaxPayloadBytes))
	}
	if r, n := cfg.Limits.ReplicaMaxBodyBytes, cfg.Limits.NamespaceMaxBodyBytes; r > 0 && (n == 0 || n > r) {
		return nil, fmt.Errorf("ingress: a namespace's body budget (Limits.NamespaceMaxBodyBytes, %d; 0: unbounded) must be within the replica's (ReplicaMaxBodyBytes, %d)", n, r)
	}
	if cfg.Auth == nil && !cfg.InsecureNoAuth {
		return nil, errors.New("ingress: Auth is required (InsecureNoAuth serves unauthenticated callers)")
	}
	s := &Server{cfg: cfg, waiters: map[string]map[chan messages.Record]waiter{},
		counts: map[string]*poolCount{}, nsBacklog: map[string]int{}, nsStreams: map[string]int{}, bodies: newBodyBudget(cfg.Limits.ReplicaMaxBodyBytes, cfg.Limits.NamespaceMaxBodyBytes, aliasBodyShare*cfg.AliasBodyBytes), m: newIngressMetrics(cfg.Registerer),
		sse: newSSEMetrics(cfg.Registerer), tracer: tracing.NewTracer(cfg.TracerProvider, "runplane/queue/ingress")}
	spec, err := SpecJSON(cfg)
	if err != nil {
		return nil, err
	}
	s.spec = spec
	// With a byte budget, the watch starts with every stored Record: each
	// replica counts the namespaces' shares from the store itself.
	opts := []jetstream.WatchOpt{jetstream.UpdatesOnly(), jetstream.IgnoreDeletes()}
	// A bounded store too: past its accept point, only the namespaces
	// above their fair share are refused (storeFull).
	if cfg.Limits.NamespaceMaxStreamBytes > 0 || cfg.Limits.NamespaceMaxRecordBytes > 0 || cfg.Store.Config.MaxBytes > 0 || cfg.Store.Config.RecordsMaxBytes > 0 {
		s.usage, opts = nsbytes.New(clock.RealClock{}, cfg.Store.Config.RecordTTL.Duration), nil
	}
	rw, err := cfg.Store.Records.WatchAll(ctx, opts...)
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
		switch {
		case e == nil: // every stored Record delivered
			s.watched.Store(true)
			continue
		case e.Operation() != jetstream.KeyValuePut:
			if s.usage != nil {
				s.usage.Delete(e.Key())
			}
			continue
		}
		// Every Record write of every replica comes here: only its Shape is
		// decoded (a few fields), and the whole Record only when it is
		// final and a sync caller here waits for it — not the queued and
		// dispatched writes of every sync call.
		waiting := s.waiting(e.Key())
		if s.usage == nil && !waiting {
			continue
		}
		var sh nsbytes.Shape
		if json.Unmarshal(e.Value(), &sh) != nil {
			continue
		}
		if s.usage != nil {
			s.usage.Put(e.Key(), len(e.Value()), e.Created(), sh)
		}
		if waiting && sh.State.Terminal() {
			if r, err := stream.Decode(e.Value()); err == nil {
				s.notify(r, "")
			}
		}
	}
}

// counted reports whether the namespaces' shares are known (always, when
// no byte budget is set).
func (s *Server) counted() bool { return s.usage == nil || s.watched.Load() }

func (s *Server) watchPools(w jetstream.KeyWatcher) {
	for e := range w.Updates() {
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		var ps messages.PoolStatus
		if json.Unmarshal(e.Value(), &ps) != nil {
			continue
		}
		s.setStatus(e.Key(), ps)
	}
}

// onReply takes a worker's sync answer. The namespace, pool and invocation
// come from the subject (reply.<ns>.<pool>.<replica>.<id>.<token>), which
// NATS permissions tie to the worker's own pool, never from the body: a
// worker cannot answer another pool's caller. The token is the caller's
// own, random, handed only to the worker its invocation was dispatched to
// (in the Dispatch, on that worker's subject): another worker of the pool,
// which may know the replica and guess the ID, cannot answer it.
func (s *Server) onReply(m *nats.Msg) {
	tail, ok := strings.CutPrefix(m.Subject, s.cfg.Store.Subjects.Prefix+".reply.")
	parts := strings.Split(tail, ".")
	if !ok || len(parts) != 5 || parts[2] != s.replica || parts[4] == "" {
		return
	}
	ns, poolName, id, token := parts[0], parts[1], parts[3], parts[4]
	var res messages.Result
	if json.Unmarshal(m.Data, &res) != nil || res.InvocationID != id || !res.State.Terminal() {
		return
	}
	// The worker's body, decoded (so valid), is answered as encoding/json
	// writes it, as a Record holds it (callback.Encode places it as it is).
	if res.Response != nil && len(res.Response.Body) > 0 {
		body, err := rawjson.Canonical(res.Response.Body)
		if err != nil {
			return
		}
		resp := *res.Response
		resp.Body = body
		res.Response = &resp
	}
	s.notify(messages.Record{InvocationID: id, Namespace: ns, Pool: poolName, State: res.State, Worker: res.Worker,
		Attempt: res.Attempt, Response: res.Response, ResponseBodyRef: res.ResponseBodyRef, Error: res.Error, UpdatedAt: res.FinishedAt}, token)
}

// waiting reports whether a sync caller here waits on invocation id (the
// watch sees every Record update; most need no decoding).
func (s *Server) waiting(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters[id]) > 0
}

// waiter is a sync caller: its pool and its reply token.
type waiter struct{ pool, token string }

// replyToken is a sync caller's reply token: 128 random bits.
func replyToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("reply token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// notify hands r to the sync callers waiting on it; token != "": r came
// from a worker's reply with that token, and only the caller of r's pool
// that holds it takes it.
func (s *Server) notify(r messages.Record, token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch, wt := range s.waiters[stream.Key(r.Namespace, r.InvocationID)] {
		if token != "" && (wt.pool != r.Pool || wt.token != token) {
			continue
		}
		select {
		case ch <- r:
		default:
		}
	}
}

func (s *Server) addWaiter(id string, wt waiter) (chan messages.Record, func()) {
	ch := make(chan messages.Record, 1)
	s.mu.Lock()
	if s.waiters[id] == nil {
		s.waiters[id] = map[chan messages.Record]waiter{}
	}
	s.waiters[id][ch] = wt
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
