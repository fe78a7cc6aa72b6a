package ingress

import (
	"fmt"
	"io"
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
	// aliasMax is the share of the seed-alias requests that name their
	// pool only inside the body (namespace ""): read before any namespace
	// is known, they share one small share of their own, so that one
	// tenant's namespace share and theirs together leave the replica room
	// for another tenant's largest body (a review filled the replica with
	// 384 stalled alias bodies and two of its own).
	aliasMax int64

	mu sync.Mutex
	// ns: the namespaces with bodies in flight, dropped when their last
	// one is released (a namespace's semaphore cannot tell it is idle).
	ns map[string]*nsBodies
}

type nsBodies struct {
	sem     *semaphore.Weighted
	holders int
}

func newBodyBudget(replicaMax, nsMax, aliasMax int64) *bodyBudget {
	b := &bodyBudget{nsMax: nsMax, aliasMax: aliasMax, ns: map[string]*nsBodies{}}
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
	share := b.nsMax
	if ns == "" && b.aliasMax > 0 {
		share = b.aliasMax
	}
	if share > 0 {
		b.mu.Lock()
		e := b.ns[ns]
		if e == nil {
			e = &nsBodies{sem: semaphore.NewWeighted(share)}
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

// unknownLengthStep is what a body without a Content-Length is counted
// for before it is read; it is counted for more as it arrives
// (growingBody). Counted at its limit up front, a namespace could have
// one chunked request in flight and a replica two, however small.
const unknownLengthStep = 1 << 20

// bodyBytes is what a request's body is counted for before it is read:
// its Content-Length when it gives one within limit, else limit (a
// longer body is refused at limit, 413); without one, unknownLengthStep.
func bodyBytes(r *http.Request, limit int64) int64 {
	switch {
	case r.ContentLength < 0:
		return min(limit, unknownLengthStep)
	case r.ContentLength <= limit:
		return r.ContentLength
	}
	return limit
}

// growingBody is a body without a Content-Length, counted for what has
// arrived: past what it holds, it takes as much again (up to the body's
// limit) before its bytes are handed on, or fails the read with the
// budget's *limitError (429). Only the handler reads it and releases it
// (net/http drains and closes the request's own body, not this one).
type growingBody struct {
	io.ReadCloser
	s        *Server
	ns, pool string
	read     int64
	held     int64
	limit    int64
	releases []func()
}

func (g *growingBody) Read(p []byte) (int, error) {
	n, err := g.ReadCloser.Read(p)
	g.read += int64(n)
	for g.read > g.held && g.held < g.limit {
		step := min(g.held, g.limit-g.held)
		release, reason := g.s.bodies.acquire(g.ns, step)
		if reason != "" {
			return n, g.s.bodyLimitError(reason, g.ns, g.pool, step)
		}
		g.releases = append(g.releases, release)
		g.held += step
	}
	return n, err
}

// release gives back everything the body took.
func (g *growingBody) release() {
	for _, r := range g.releases {
		r()
	}
	g.releases = nil
}

// holdBody takes the budget for r's body (at most limit bytes) of
// namespace ns ("": a seed-alias request that names no pool in its query:
// those share the alias share), or answers 429 naming the
// full budget (404 for a pool that does not exist: what the request
// would get anyway, and the namespace label of the 429s stays bounded by
// the namespaces that have pools).
func (s *Server) holdBody(w http.ResponseWriter, r *http.Request, ns, poolName string, limit int64) (release func(), ok bool) {
	n := bodyBytes(r, limit)
	release, reason := s.bodies.acquire(ns, n)
	if reason == "" {
		if r.ContentLength < 0 && n < limit {
			g := &growingBody{ReadCloser: r.Body, s: s, ns: ns, pool: poolName, held: n, limit: limit, releases: []func(){release}}
			r.Body = g
			return g.release, true
		}
		return release, true
	}
	if ns != "" {
		if _, known := s.cfg.Pools.Lookup(ns, poolName); !known {
			s.reject(w, http.StatusNotFound, unknownPool(ns, poolName))
			return nil, false
		}
	}
	s.tooMany(w, s.bodyLimitError(reason, ns, poolName, n))
	return nil, false
}

// bodyLimitError is the 429 of a body budget that is full (reason) for n
// more bytes.
func (s *Server) bodyLimitError(reason, ns, poolName string, n int64) *limitError {
	le := &limitError{Reason: reason, Namespace: ns, Pool: poolName, Need: n, RetryAfter: 1}
	le.Max = int(s.cfg.Limits.ReplicaMaxBodyBytes)
	switch {
	case reason == ReasonNamespaceBodyBytes && ns == "":
		le.Max = int(s.bodies.aliasMax)
	case reason == ReasonNamespaceBodyBytes:
		le.Max = int(s.cfg.Limits.NamespaceMaxBodyBytes)
	}
	return le
}

// bodyMessage is the text of a body budget's 429.
func (e *limitError) bodyMessage() string {
	if e.Reason == ReasonReplicaBodyBytes {
		return fmt.Sprintf("this queue replica holds as many request-body bytes as it may (%d, limits.replicaMaxBodyBytes, chart "+
			"queue.limits.replicaMaxBodyBytes); this request's %d bytes do not fit until other requests' bodies have been read: retry shortly",
			e.Max, e.Need)
	}
	if e.Namespace == "" {
		return fmt.Sprintf("seed-alias requests that name no pool in their query hold their share of this queue replica's request-body bytes "+
			"in flight (%d: %d of their bodies); this request's %d bytes do not fit until their bodies have been read: name the pool in the "+
			"query (?namespace=…&serverlessRequestID=…) or retry shortly", e.Max, aliasBodyShare, e.Need)
	}
	who := fmt.Sprintf("namespace %q", e.Namespace)
	return fmt.Sprintf("%s hold their share of this queue replica's request-body bytes in flight (%d, limits.namespaceMaxBodyBytes, chart "+
		"queue.limits.namespaceMaxBodyBytes); this request's %d bytes do not fit until their bodies have been read: retry shortly", who, e.Max, e.Need)
}
