package ingress

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/runplane/runplane/internal/httpjson"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/stream"
)

// The reasons of a 429, in its body ("limit") and in the reason label of
// runplane_ingress_limited_total.
const (
	ReasonPoolBacklog      = "pool_backlog"
	ReasonNamespaceBacklog = "namespace_backlog"
	ReasonNamespaceStreams = "namespace_streams"
)

// poolCount is one pool's backlog as this replica knows it: the
// activator's last status (Backlog as of InvokeSeq), the stream sequences
// accepted here after it, and the requests being accepted now (a slot is
// reserved before the Record is created, so concurrent requests cannot
// overshoot a limit).
type poolCount struct {
	status   messages.PoolStatus
	local    []uint64
	reserved int
}

func (c *poolCount) backlog() int { return c.status.Backlog + len(c.local) + c.reserved }

// change applies fn to the count of pool key pk (stream.PoolKey) and keeps
// its namespace's sum. Called with s.mu held.
func (s *Server) change(pk string, fn func(c *poolCount)) {
	ns, _, _ := strings.Cut(pk, ".")
	c := s.counts[pk]
	if c == nil {
		c = &poolCount{}
		s.counts[pk] = c
	}
	before := c.backlog()
	fn(c)
	if s.nsBacklog[ns] += c.backlog() - before; s.nsBacklog[ns] <= 0 {
		delete(s.nsBacklog, ns)
	}
}

// setStatus takes the activator's new status of pool pk, keeping what it
// had not taken in when it wrote it: what this replica accepted above its
// InvokeSeq (a status without one, from an older activator, covers all).
func (s *Server) setStatus(pk string, ps messages.PoolStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.change(pk, func(c *poolCount) {
		c.status = ps
		kept := c.local[:0]
		for _, q := range c.local {
			if ps.InvokeSeq != nil && q > *ps.InvokeSeq {
				kept = append(kept, q)
			}
		}
		c.local = kept
	})
}

// limitError is a full backlog: the pool's or its namespace's.
type limitError struct {
	Reason    string
	Namespace string
	Pool      string
	Max       int
	// Used and Need: a byte budget's bytes held and asked for.
	Used, Need int64
	// RetryAfter overrides the Retry-After seconds (0: by the pool's
	// workers).
	RetryAfter int
}

func (e *limitError) Error() string {
	if e.Reason == ReasonNamespaceStreamBytes || e.Reason == ReasonNamespaceRecordBytes {
		return e.budgetMessage()
	}
	if e.Reason == ReasonNamespaceBodyBytes || e.Reason == ReasonReplicaBodyBytes {
		return e.bodyMessage()
	}
	if e.Reason == ReasonNamespaceStreams {
		return fmt.Sprintf("namespace %q has %d result streams open on this replica, the namespace limit: close one or retry later", e.Namespace, e.Max)
	}
	if e.Reason == ReasonNamespaceBacklog {
		return fmt.Sprintf("namespace %q backlog is full (%d queued in all its pools, the namespace limit): retry later", e.Namespace, e.Max)
	}
	return fmt.Sprintf("pool %q of namespace %q backlog is full (%d queued, the pool limit): retry later", e.Pool, e.Namespace, e.Max)
}

// reserve takes one backlog slot of ns/pool, or says which limit is
// reached; poolMax is the pool's bound (0: none). A slot taken is given
// back with release.
func (s *Server) reserve(ns, poolName string, poolMax int) *limitError {
	pk := stream.PoolKey(ns, poolName)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.counts[pk]; poolMax > 0 && c != nil && c.backlog() >= poolMax {
		return &limitError{Reason: ReasonPoolBacklog, Namespace: ns, Pool: poolName, Max: poolMax}
	}
	if nsMax := s.cfg.Limits.NamespaceMaxBacklog; nsMax > 0 && s.nsBacklog[ns] >= nsMax {
		return &limitError{Reason: ReasonNamespaceBacklog, Namespace: ns, Pool: poolName, Max: nsMax}
	}
	s.change(pk, func(c *poolCount) { c.reserved++ })
	return nil
}

// release gives back a slot of ns/pool taken by reserve; seq != 0: the
// invocation stored at stream sequence seq now counts instead, until the
// activator's status covers it.
func (s *Server) release(ns, poolName string, seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.change(stream.PoolKey(ns, poolName), func(c *poolCount) {
		c.reserved--
		if seq != 0 {
			c.local = append(c.local, seq)
		}
	})
}

// openStream takes one of namespace ns's result-stream slots, or says the
// limit is reached; closeStream gives it back.
func (s *Server) openStream(ns, poolName string) *limitError {
	s.mu.Lock()
	defer s.mu.Unlock()
	if nsMax := s.cfg.Limits.NamespaceMaxStreams; nsMax > 0 && s.nsStreams[ns] >= nsMax {
		return &limitError{Reason: ReasonNamespaceStreams, Namespace: ns, Pool: poolName, Max: nsMax}
	}
	s.nsStreams[ns]++
	return nil
}

func (s *Server) closeStream(ns string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nsStreams[ns]--; s.nsStreams[ns] <= 0 {
		delete(s.nsStreams, ns)
	}
}

// tooMany answers 429 for a full backlog: the body names the limit, the
// namespace and the pool; Retry-After is short when the pool has workers.
func (s *Server) tooMany(w http.ResponseWriter, le *limitError) {
	retry := 5
	s.mu.Lock()
	if c := s.counts[stream.PoolKey(le.Namespace, le.Pool)]; c != nil && c.status.Capacity > 0 {
		retry = 1
	}
	s.mu.Unlock()
	if le.RetryAfter > 0 {
		retry = le.RetryAfter
	}
	s.m.rejected.WithLabelValues(strconv.Itoa(http.StatusTooManyRequests)).Inc()
	s.m.limited.WithLabelValues(le.Reason, le.Namespace).Inc()
	w.Header().Set("Retry-After", strconv.Itoa(retry))
	httpjson.WriteProblem(w, http.StatusTooManyRequests, LimitProblem{Problem: httpjson.NewProblem(nil, http.StatusTooManyRequests, le.Error()),
		Limit: le.Reason, Max: le.Max, Namespace: le.Namespace, Pool: le.Pool})
}
