package state

import (
	"sort"
	"time"

	"github.com/runplane/runplane/internal/messages"
)

// Status summarises the pool named key (Key(ns, pool)); replicas is its
// workload's.
func (s *State) Status(key string, replicas int) messages.PoolStatus {
	now := s.clk.Now()
	p := s.Pool(key)
	pos := s.position(p)
	st := messages.PoolStatus{Namespace: p.Namespace, Pool: p.Name, Replicas: replicas, Backlog: len(p.Queue), InvokeSeq: &pos, Workers: []messages.WorkerStatus{}}
	names := make([]string, 0, len(p.Workers))
	for n := range p.Workers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		w := p.Workers[n]
		st.InFlight += len(w.InFlight)
		ready := w.Registered && w.Ready && !w.Silent
		if ready && !w.Draining {
			st.Capacity += w.Concurrency
		}
		st.Workers = append(st.Workers, messages.WorkerStatus{Name: n, Ready: ready, Draining: w.Draining || now.Before(w.DrainUntil),
			Starting: !ready && !w.Silent, Silent: w.Silent, Concurrency: w.Concurrency, InFlight: len(w.InFlight)})
	}
	return st
}

// Uncovered reports whether a status with InvokeSeq pos would tell the
// ingress more than the last one published: the pool has an invocation
// message above that one's InvokeSeq which pos reaches further into. A
// status is not published again for each move of the position alone (it
// moves with every pool's invocations), only for these and with its
// other changes; the ingress's count of the pool waits for no more.
func (p *Pool) Uncovered(pos uint64) bool { return p.SeenSeq > p.SentSeq && pos > p.SentSeq }

// OldestQueued is when the pool named key accepted the invocation that has
// waited longest in its queue; false when nothing waits.
func (s *State) OldestQueued(key string) (time.Time, bool) {
	p := s.Pool(key)
	if len(p.Queue) == 0 {
		return time.Time{}, false
	}
	oldest := p.Queue[0].Inv.AcceptedAt
	for _, it := range p.Queue[1:] {
		if it.Inv.AcceptedAt.Before(oldest) {
			oldest = it.Inv.AcceptedAt
		}
	}
	return oldest, true
}

// ScaleInput is what the scaling policy needs of a pool: its backlog, what
// is in flight, the workers as the policy sees them and, for an empty
// pool, how long its oldest invocation has waited.
func (s *State) ScaleInput(pool string, startupTimeout time.Duration) (backlog, inflight int, views []WorkerView, waited time.Duration) {
	now := s.clk.Now()
	p := s.Pool(pool)
	for _, w := range p.Workers {
		inflight += len(w.InFlight)
		if (w.Pod != nil && w.Pod.Terminating) || s.pickedLately(w, now) {
			// Leaving: its Pod is going, or a scale-down just picked it
			// and its Pod is not seen terminating yet. Counted, a later
			// scale-down would pick it again, and the ReplicaSet
			// controller would choose which Pod goes — a busy one as soon
			// as any.
			continue
		}
		ready := w.Registered && w.Ready && !w.Silent
		starting := !ready && !w.Silent && w.Pod != nil && now.Sub(w.Pod.Created) < startupTimeout
		views = append(views, WorkerView{Name: w.Name, Ready: ready && !w.Draining, Starting: starting, InFlight: len(w.InFlight), IdleSince: w.IdleSince})
	}
	for _, it := range p.Queue {
		waited = max(waited, now.Sub(it.Inv.AcceptedAt))
	}
	return len(p.Queue), inflight, views, waited
}

// pickedFor is how long a worker a scale-down picked stays out of the
// next decisions: long enough for its Pod's deletion to be seen (as long
// as scaleAll takes its own replicas decision for the current one), and
// no longer — the ReplicaSet controller deletes an unready Pod before a
// low deletion cost, and a picked worker whose Pod it kept is picked again
// then rather than kept for the whole DrainHold (a burst's idle
// scale-down waited a minute so).
const pickedFor = 5 * time.Second

// pickedLately reports whether a scale-down picked w less than pickedFor
// ago (Hold).
func (s *State) pickedLately(w *Worker, now time.Time) bool {
	return now.Before(w.DrainUntil) && now.Sub(w.DrainUntil.Add(-s.cfg.DrainHold)) < pickedFor
}

// Hold keeps the named workers of pool from new work for DrainHold: they
// are about to be removed by a scale-down.
func (s *State) Hold(pool string, workers []string) {
	until := s.clk.Now().Add(s.cfg.DrainHold)
	p := s.Pool(pool)
	for _, n := range workers {
		if w := p.Workers[n]; w != nil {
			w.DrainUntil = until
		}
	}
}
