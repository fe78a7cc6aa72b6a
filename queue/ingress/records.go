package ingress

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	v1 "github.com/runplane/runplane/api/serverless/v1"
	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/internal/httpjson"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/queue/stream"
)

// invocationPath reads and checks {ns} and {id}; it answers 400 itself.
func invocationPath(w http.ResponseWriter, r *http.Request) (ns, id string, ok bool) {
	ns, id = r.PathValue("namespace"), r.PathValue("id")
	if err := errors.Join(validNamespace(ns), validID("invocation ID", id)); err != nil {
		problem(w, r, http.StatusBadRequest, err.Error())
		return ns, id, false
	}
	return ns, id, true
}

func notFound(w http.ResponseWriter, ns, id string) {
	problem(w, nil, http.StatusNotFound, fmt.Sprintf("invocation %q not found in namespace %q", id, ns))
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
	s.writeRecord(w, r.Context(), http.StatusOK, rec)
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
		problem(w, r, http.StatusServiceUnavailable, err.Error())
		return
	}
	if !changed {
		httpjson.WriteProblem(w, http.StatusConflict, InvocationProblem{Problem: httpjson.NewProblem(r, http.StatusConflict,
			fmt.Sprintf("invocation %s is already %s", id, rec.State)), InvocationID: id, State: v1.State(rec.State)})
		return
	}
	if (before.State == messages.StateDispatched || before.State == messages.StateRunning) && before.Worker != "" {
		// The worker is told; its late result cannot overwrite cancelled.
		b, _ := json.Marshal(messages.Cancel{InvocationID: id, Attempt: before.Attempt})
		if err := s.cfg.NC.Publish(s.cfg.Store.Subjects.Cancel(before.Namespace, before.Pool, before.Worker), b); err != nil {
			s.cfg.Logger.Warn("send cancel", "invocation", id, "err", err)
		}
	}
	s.writeRecord(w, r.Context(), http.StatusOK, rec)
}

func (s *Server) handlePool(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("pool")
	if err := errors.Join(validNamespace(ns), validPool(name)); err != nil {
		problem(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if !s.allowed(w, r, callerauth.Request{Verb: VerbRead, Namespace: ns, Pool: name}) {
		return
	}
	p, ok := s.cfg.Pools.Lookup(ns, name)
	if !ok {
		problem(w, r, http.StatusNotFound, unknownPool(ns, name))
		return
	}
	info := newPoolInfo(p)
	if e, err := s.cfg.Store.Pools.Get(r.Context(), stream.PoolKey(ns, name)); err == nil {
		var ps messages.PoolStatus
		if json.Unmarshal(e.Value(), &ps) == nil {
			info.Status = newPoolStatus(ps)
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
