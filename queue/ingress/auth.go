package ingress

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/refusal"
	"github.com/runplane/runplane/queue/stream"
)

// The verbs of the ingress routes on resource pools (API group
// serverless.runplane.io), as RBAC sees them:
//
//	POST .../pools/{pool}/invocations (and the alias)  create pools/invocations
//	GET  .../invocations/{id}                          get    pools/invocations
//	POST .../invocations/{id}/cancel                   update pools/invocations
//	GET  .../pools/{pool}                              get    pools
const (
	VerbInvoke = "create"
	VerbRead   = "get"
	VerbCancel = "update"
)

// allowed reports whether the caller may do req; when not, it has answered
// (401, 403 naming verb, resource, namespace and pool, or 503).
func (s *Server) allowed(w http.ResponseWriter, r *http.Request, req callerauth.Request) bool {
	if s.cfg.Auth == nil {
		return true
	}
	// A clone: the bearer-token reader removes the header it accepted, and
	// a later check of the same request (resultReadable) needs it again.
	_, err := s.cfg.Auth.Check(r.Clone(r.Context()), req)
	if err == nil {
		return true
	}
	s.refuse(w, req, err)
	return false
}

func (s *Server) refuse(w http.ResponseWriter, req callerauth.Request, err error) {
	if s.answerRefusal(w, err) {
		return
	}
	s.cfg.Logger.Warn("caller authorization: apiserver unavailable", "request", req.String(), "err", err)
	s.m.rejected.WithLabelValues("503").Inc()
	problem(w, nil, http.StatusServiceUnavailable, fmt.Sprintf("cannot ask the apiserver whether the caller may %s: %v", req, err))
}

// decoyPool is the pool an unknown ID's check asks about: not a DNS-1123
// label, so no pool has its name.
const decoyPool = "-none-"

// retryAfter is d as a Retry-After header: whole seconds, rounded up.
func retryAfter(d time.Duration) string { return strconv.Itoa(int(math.Ceil(d.Seconds()))) }

// record reads invocation id of namespace ns for a caller who wants to do
// verb on it, and answers when it may not. The pool is known only from the
// Record, so a caller who may not do verb on that pool gets exactly the
// answer it would get for an ID that does not exist: the namespace-wide
// check's 403 (or 404 when it may do verb on every pool of the namespace).
// Nothing tells a caller whether an ID exists in a namespace or pool it has
// no access to.
func (s *Server) record(w http.ResponseWriter, r *http.Request, ns, id, verb string) (messages.Record, bool) {
	rec, _, err := s.cfg.Store.Get(r.Context(), stream.Key(ns, id))
	found := err == nil
	if err != nil && !errors.Is(err, stream.ErrNotFound) {
		problem(w, r, http.StatusServiceUnavailable, err.Error())
		return rec, false
	}
	// A predecessor's Record (a namespace deleted and made again under
	// this name) is answered as missing, with no hint it exists. Checked
	// only for a caller allowed to see the Record: the check may read the
	// Namespace, which an anonymous caller must not make the queue do.
	same := func() (bool, bool) {
		ok, err := s.sameNamespace(r.Context(), rec)
		if err != nil {
			problem(w, r, http.StatusServiceUnavailable, err.Error())
			return false, false
		}
		return ok, true
	}
	if s.cfg.Auth == nil {
		if found {
			var answered bool
			if found, answered = same(); !answered {
				return rec, false
			}
		}
		if !found {
			notFound(w, ns, id)
			return messages.Record{}, false
		}
		return rec, true
	}
	// An unknown ID costs the same pool check as an existing one, of a
	// pool no Record can name (its answer unused): the time of the answer
	// then tells less of whether the ID exists (SECURITY.md has what is
	// left).
	req := callerauth.Request{Verb: verb, Namespace: ns, Pool: rec.Pool, Subresource: callerauth.SubresourceInvocations}
	if !found {
		req.Pool = decoyPool
	}
	// A clone: the bearer-token reader removes the header it accepted,
	// and the namespace-wide check below needs it again.
	_, err = s.cfg.Auth.Check(r.Clone(r.Context()), req)
	if found {
		ref, refused := errors.AsType[*refusal.Error](err)
		switch {
		case err == nil:
			ok, answered := same()
			if !answered {
				return rec, false
			}
			if ok {
				return rec, true
			}
			rec = messages.Record{}
		case !refused:
			s.refuse(w, req, err)
			return rec, false
		case ref.Status != http.StatusForbidden:
			s.refuse(w, req, err) // 401: the same for any ID
			return rec, false
		}
	}
	nsWide := callerauth.Request{Verb: verb, Namespace: ns, Subresource: callerauth.SubresourceInvocations}
	if s.allowed(w, r, nsWide) {
		notFound(w, ns, id)
	}
	return rec, false
}

// authorizeInvoke checks create on pools/invocations of ns/pool.
func (s *Server) authorizeInvoke(w http.ResponseWriter, r *http.Request, ns, poolName string) bool {
	if err := errors.Join(validNamespace(ns), validPool(poolName)); err != nil {
		s.reject(w, http.StatusBadRequest, err.Error())
		return false
	}
	return s.allowed(w, r, callerauth.Request{Verb: VerbInvoke, Namespace: ns, Pool: poolName, Subresource: callerauth.SubresourceInvocations})
}

// resultReadable checks, for a re-post of an existing invocation ID that
// would answer with its stored Record (sync mode), that the caller may
// also get pools/invocations of the pool: create alone must not read
// another caller's results.
func (s *Server) resultReadable(w http.ResponseWriter, r *http.Request, ns, poolName string) bool {
	return s.allowed(w, r, callerauth.Request{Verb: VerbRead, Namespace: ns, Pool: poolName, Subresource: callerauth.SubresourceInvocations})
}
