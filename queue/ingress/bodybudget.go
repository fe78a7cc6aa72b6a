package ingress

import (
	"fmt"
	"net/http"
	"sync"

	"golang.org/x/sync/semaphore"
)

// The reasons of a 429 for the request bodies in flight (limitError).
const (
	ReasonNamespaceBodyBytes = "namespace_body_bytes"
	ReasonReplicaBodyBytes   = "replica_body_bytes"
)

// bodyBudget bounds the request-body bytes this replica holds in memory
// at once: all namespaces together (replica) and each namespace (its
// share, so that one tenant's concurrent big bodies cannot take the
// replica's memory from the others). One body is bounded by the body
// limits; this bounds how many are held together.
type bodyBudget struct {
	replica *semaphore.Weighted // nil: unbounded
	nsMax   int64               // 0: unbounded

	mu sync.Mutex
	// ns: the namespaces with bodies in flight, dropped when their last
	// one is released (a namespace's semaphore cannot tell it is idle).
	ns map[string]*nsBodies
}

type nsBodies struct {
	sem     *semaphore.Weighted
	holders int
}

func newBodyBudget(replicaMax, nsMax int64) *bodyBudget {
	b := &bodyBudget{nsMax: nsMax, ns: map[string]*nsBodies{}}
	if replicaMax > 0 {
		b.replica = semaphore.NewWeighted(replicaMax)
	}
	return b
}

// acquire takes n bytes of namespace ns's share and of the replica's
// budget, without waiting: a refused request holds nothing (its caller
// retries; waiting would hold its connection and a goroutine for a body
// not read yet). release gives them back, once however often it is
// called. The reason names the budget that is full.
func (b *bodyBudget) acquire(ns string, n int64) (release func(), reason string) {
	var nsRelease func()
	if b.nsMax > 0 {
		b.mu.Lock()
		e := b.ns[ns]
		if e == nil {
			e = &nsBodies{sem: semaphore.NewWeighted(b.nsMax)}
			b.ns[ns] = e
		}
		if !e.sem.TryAcquire(n) {
			b.dropIdle(ns, e)
			b.mu.Unlock()
			return nil, ReasonNamespaceBodyBytes
		}
		e.holders++
		b.mu.Unlock()
		nsRelease = func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			e.sem.Release(n)
			e.holders--
			b.dropIdle(ns, e)
		}
	}
	if b.replica != nil && !b.replica.TryAcquire(n) {
		if nsRelease != nil {
			nsRelease()
		}
		return nil, ReasonReplicaBodyBytes
	}
	return sync.OnceFunc(func() {
		if b.replica != nil {
			b.replica.Release(n)
		}
		if nsRelease != nil {
			nsRelease()
		}
	}), ""
}

// dropIdle forgets namespace ns when nothing of it is held. Called with
// b.mu held.
func (b *bodyBudget) dropIdle(ns string, e *nsBodies) {
	if e.holders == 0 {
		delete(b.ns, ns)
	}
}

// bodyBytes is what a request's body is counted for before it is read:
// its Content-Length when it gives one within limit, else limit (a
// longer body is refused at limit, 413).
func bodyBytes(r *http.Request, limit int64) int64 {
	if r.ContentLength >= 0 && r.ContentLength <= limit {
		return r.ContentLength
	}
	return limit
}

// holdBody takes the budget for r's body (at most limit bytes) of
// namespace ns ("": a seed-alias request that names its pool only inside
// its body: those share one namespace's share), or answers 429 naming the
// full budget (404 for a pool that does not exist: what the request
// would get anyway, and the namespace label of the 429s stays bounded by
// the namespaces that have pools).
func (s *Server) holdBody(w http.ResponseWriter, r *http.Request, ns, poolName string, limit int64) (release func(), ok bool) {
	n := bodyBytes(r, limit)
	release, reason := s.bodies.acquire(ns, n)
	if reason == "" {
		return release, true
	}
	if ns != "" {
		if _, known := s.cfg.Pools.Lookup(ns, poolName); !known {
			s.reject(w, http.StatusNotFound, unknownPool(ns, poolName))
			return nil, false
		}
	}
	le := &limitError{Reason: reason, Namespace: ns, Pool: poolName, Need: n, RetryAfter: 1}
	le.Max = int(s.cfg.Limits.ReplicaMaxBodyBytes)
	if reason == ReasonNamespaceBodyBytes {
		le.Max = int(s.cfg.Limits.NamespaceMaxBodyBytes)
	}
	s.tooMany(w, le)
	return nil, false
}

// bodyMessage is the text of a body budget's 429.
func (e *limitError) bodyMessage() string {
	if e.Reason == ReasonReplicaBodyBytes {
		return fmt.Sprintf("this queue replica holds as many request-body bytes as it may (%d, limits.replicaMaxBodyBytes, chart "+
			"queue.limits.replicaMaxBodyBytes); this request's %d bytes do not fit until other requests' bodies have been read: retry shortly",
			e.Max, e.Need)
	}
	who := fmt.Sprintf("namespace %q", e.Namespace)
	if e.Namespace == "" {
		who = "seed-alias requests that name their pool only inside the body"
	}
	return fmt.Sprintf("%s hold their share of this queue replica's request-body bytes in flight (%d, limits.namespaceMaxBodyBytes, chart "+
		"queue.limits.namespaceMaxBodyBytes); this request's %d bytes do not fit until their bodies have been read: retry shortly", who, e.Max, e.Need)
}
