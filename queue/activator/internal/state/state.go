// Package state is the activator's pure core: the per-pool queues, the
// workers and the invocations in flight, and every decision taken on them
// (dispatch to the least-loaded worker, worker loss, redelivery with
// backoff, dead letters, expiry, scaling, status). It does no I/O and reads
// time from an injected clock; the activator holds the lock around it and
// carries out what it decides (Record writes, publishes, scale calls).
package state

import (
	"cmp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/pool"
)

// Config holds the settings the decisions apply. The activator passes it
// down as it is (activator.Decisions), defaulted by Default.
type Config struct {
	// Workers is the configuration file's workers section.
	Workers
	// Limits: PoolMaxInFlight is the in-flight bound of a pool until
	// SetMaxInFlight gives its own; NamespaceMaxInFlight bounds every pool
	// of a namespace together (0: unbounded). Defaulted (WithDefaults).
	Limits pool.Limits
	// Backoff is the first redelivery delay, doubled per strike up to
	// MaxBackoff (defaults 500ms, 30s).
	Backoff, MaxBackoff time.Duration
	// ExecutionGrace is added to timeoutSeconds before a dispatched
	// invocation times out (default 10s).
	ExecutionGrace time.Duration
	// DrainHold: how long a worker picked for scale-down gets no new work
	// (default 60s).
	DrainHold time.Duration
	// RequirePods admits a worker only once PodSeen has (the caller checked
	// that its Pod is in the pool's namespace and owned by the pool's
	// workload). Events of other workers are held (up to HeartbeatTimeout)
	// and applied when the Pod is admitted; they never make a worker. Set
	// by the activator (with Kubernetes).
	RequirePods bool
}

// Default fills the zero fields: the one place the decisions' settings
// get their defaults.
func (c *Config) Default() {
	c.Workers.Default()
	c.Limits = c.Limits.WithDefaults()
	c.Backoff = cmp.Or(c.Backoff, 500*time.Millisecond)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, 30*time.Second)
	c.ExecutionGrace = cmp.Or(c.ExecutionGrace, 10*time.Second)
	c.DrainHold = cmp.Or(c.DrainHold, 60*time.Second)
}

// MaxPending bounds the Events held for workers not (yet) admitted.
const MaxPending = 10000

// Key names a pool (namespace/pool) or an invocation (namespace/ID) in
// the State: both are unique only within their namespace.
func Key(ns, name string) string { return ns + "/" + name }

// PoolKey is the Key of inv's pool; ItemKey the Key of inv itself.
func PoolKey(inv messages.Invocation) string { return Key(inv.Namespace, inv.Pool) }

// ItemKey is the Key of invocation inv.
func ItemKey(inv messages.Invocation) string { return Key(inv.Namespace, inv.InvocationID) }

// State is every pool's queue and workers and every open invocation. It is
// not safe for concurrent use: the caller serialises access.
type State struct {
	cfg   Config
	clk   clock.PassiveClock
	pools map[string]*Pool // by Key(namespace, pool)
	items map[string]*Item // by Key(namespace, invocation ID)
	// pending holds the last Event of each worker not admitted (yet), by
	// Key(namespace, pool) + "/" + worker.
	pending map[string]pendingEvent
	// resultSeq is the highest stream sequence the results consumer has
	// delivered: every result stored before it has been seen.
	resultSeq uint64
	// turn rotates the order in which Dispatch serves pools and namespaces.
	turn int
	// floors is what is known of each subject's messages (floors.go);
	// seen the highest invocation stream sequence seen.
	floors map[Subject]*subjectFloor
	seen   uint64
	// intake is how far the invoke consumer took the stream in (intake.go).
	intake intake
}

// New returns an empty State.
func New(cfg Config, clk clock.PassiveClock) *State {
	return &State{cfg: cfg, clk: clk, pools: map[string]*Pool{}, items: map[string]*Item{}, pending: map[string]pendingEvent{},
		floors: map[Subject]*subjectFloor{}}
}

// Item is one open invocation.
type Item struct {
	Inv          messages.Invocation
	Seq          uint64 // stream sequence of the invocation
	Attempt      int    // last dispatched attempt; 0 = never dispatched
	Worker       string // worker of the current attempt ("" while queued or settling)
	Queued       bool
	NotBefore    time.Time
	DispatchedAt time.Time
	// Started: the worker reported invocation.started for this attempt.
	Started bool
	// Light: Inv holds no payload, headers or attributes (and Rec is
	// empty): it waits deep in a long queue, and its dispatch reads the
	// invocation back from the stream at Seq (Lighten).
	Light bool
	// Strikes counts the losses that count towards MaxAttempts: a worker
	// that deregistered with nothing in flight never ran it.
	Strikes int
	// DispatchSeq is the stream sequence of the current attempt's Dispatch
	// (0: unknown), deleted when the attempt is given up.
	DispatchSeq uint64
	// holds are the invocation's messages this leader knows — the
	// invocation's, every attempt's Dispatch — held in the stream until
	// the invocation is final (Final: final is set).
	holds []Hold
	final bool
	// Dispatches names the worker of each attempt this leader dispatched
	// (or found recorded): a Result is taken only from the worker of its
	// attempt. Unverified is the last attempt whose worker is not known
	// (dispatched by a previous leader; 0: none): results of those are
	// taken as before.
	Dispatches map[int]string
	Unverified int
	// Tokens holds each attempt's ResultToken (SetResultToken).
	Tokens map[int]string
	// Retries counts the failed attempts retried under the pool's retry
	// policy (RetryOf); RetriedAttempt is the last of them: results of it
	// or an earlier attempt no longer decide anything.
	Retries, RetriedAttempt int
	// RetriedResult is the attempt whose *result* the retry policy retried
	// (0: none), what the next Dispatch names (Dispatch.RetryOf) so the
	// worker that ran it runs the retry. Unlike RetriedAttempt it is never
	// an attempt handed back unstarted: a worker may run a later attempt of
	// an execution it holds only when the activator saw that execution's
	// result and asked again.
	RetriedResult int

	// Done is set once a result (or the activator's own verdict) is known:
	// pending intermediate Record writes are skipped.
	Done atomic.Bool
	// WriteMu serialises this invocation's Record writes; Rec is the Record
	// as last written or read (under WriteMu), so most writes need no read.
	WriteMu sync.Mutex
	Rec     messages.Cached
	// ingressRec: Rec is the Record the ingress created, never read or
	// written since (FromIngress); created is what Lighten kept of it,
	// which Unlighten makes it again from: a deep queue's dispatch reads
	// no Record.
	ingressRec bool
	created    *created

	// Trace is the ingress span the invocation's message named (its
	// traceparent; invalid: none): the parent of each dispatch's span.
	Trace trace.SpanContext
}

// Worker is one worker of a pool, known from its Pod or its Events.
type Worker struct {
	Name, Pool, Namespace string
	Concurrency           int
	InFlight              map[string]*Item
	Ready, Draining       bool
	Registered            bool
	// Silent: not heard for HeartbeatTimeout; it gets no new work, and
	// what it holds is held for it (Config.SilentHold).
	Silent              bool
	LastSeen, IdleSince time.Time
	DrainUntil          time.Time
	Pod                 *Pod
}

// Pod is what the Pod informer says about a worker.
type Pod struct {
	Created     time.Time
	Terminating bool
}

// Pool is one pool's queue and workers.
type Pool struct {
	Namespace string
	Name      string
	// InvokeSeq: every invocation message of the pool at or below it is
	// taken in (intake.go); SeenSeq is the highest the state has seen of
	// it, SentSeq the InvokeSeq of the last status published.
	InvokeSeq, SeenSeq, SentSeq uint64
	Queue                       []*Item
	Workers                     map[string]*Worker
	// MaxInFlight bounds the pool's dispatched invocations (0: unbounded);
	// LimitSet: the pool's own bound is known (SetMaxInFlight).
	MaxInFlight int
	LimitSet    bool
	// Status publishing and scaling bookkeeping of the activator.
	LastStatus []byte
	StatusAt   time.Time
	Scaling    bool
	SetTo      int
	SetAt      time.Time
}

// Pool returns (creating) the state of the pool named key (Key(ns, pool)).
func (s *State) Pool(key string) *Pool {
	p := s.pools[key]
	if p == nil {
		ns, name, _ := strings.Cut(key, "/")
		p = &Pool{Namespace: ns, Name: name, Workers: map[string]*Worker{}, MaxInFlight: s.cfg.Limits.PoolMaxInFlight}
		s.pools[key] = p
	}
	return p
}

// PoolNames lists the Keys of the pools with state.
func (s *State) PoolNames() []string {
	names := make([]string, 0, len(s.pools))
	for n := range s.pools {
		names = append(names, n)
	}
	return names
}

// Item returns the open invocation key (Key(ns, id); nil if none).
func (s *State) Item(key string) *Item { return s.items[key] }

// Now is the clock's time.
func (s *State) Now() time.Time { return s.clk.Now() }

// ResultSeq is the highest result stream sequence delivered.
func (s *State) ResultSeq() uint64 { return s.resultSeq }

// NoteResultSeq records that results up to seq were delivered.
func (s *State) NoteResultSeq(seq uint64) { s.resultSeq = max(s.resultSeq, seq) }

func (s *State) newWorker(name, pool, namespace string) *Worker {
	return &Worker{Name: name, Pool: pool, Namespace: namespace, Concurrency: 1, InFlight: map[string]*Item{}}
}

func (w *Worker) take(id string, now time.Time) {
	delete(w.InFlight, id)
	if len(w.InFlight) == 0 {
		w.IdleSince = now
	}
}
