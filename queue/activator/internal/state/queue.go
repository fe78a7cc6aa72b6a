package state

import (
	"time"

	"github.com/runplane/runplane/internal/messages"
)

// Assignment is a dispatch decided by Dispatch: the caller records the
// attempt and publishes it.
type Assignment struct {
	Item      *Item
	Worker    string
	Namespace string
	Attempt   int
}

// Accept notes that the invoke consumer delivered seq of pool and reports
// whether id is already open.
func (s *State) Accept(pool, id string, seq uint64) (known bool) {
	p := s.Pool(pool)
	p.InvokeSeq = max(p.InvokeSeq, seq)
	_, known = s.items[id]
	return known
}

// Enqueue queues it unless its invocation is open already.
func (s *State) Enqueue(it *Item) bool {
	if _, known := s.items[it.Inv.InvocationID]; known {
		return false
	}
	it.Queued = true
	s.items[it.Inv.InvocationID] = it
	p := s.Pool(it.Inv.Pool)
	p.Queue = append(p.Queue, it)
	return true
}

// Dispatchable reports whether w may take one more invocation at now.
func (w *Worker) Dispatchable(now time.Time) bool {
	return w.Registered && w.Ready && !w.Draining && now.After(w.DrainUntil) &&
		(w.Pod == nil || !w.Pod.Terminating) && len(w.InFlight) < w.Concurrency
}

// Dispatch assigns queued invocations whose backoff is over to the
// least-loaded dispatchable workers, pool by pool, in queue order.
func (s *State) Dispatch() []Assignment {
	now := s.clk.Now()
	var out []Assignment
	for _, p := range s.pools {
		if len(p.Queue) == 0 {
			continue
		}
		var ws []*Worker
		for _, w := range p.Workers {
			if w.Dispatchable(now) {
				ws = append(ws, w)
			}
		}
		if len(ws) == 0 {
			continue
		}
		rest := p.Queue[:0]
		for i, it := range p.Queue {
			if it.NotBefore.After(now) {
				rest = append(rest, it)
				continue
			}
			w := LeastLoaded(ws, now)
			if w == nil {
				rest = append(rest, p.Queue[i:]...)
				break
			}
			it.Queued, it.Started = false, false
			it.Attempt++
			it.Worker, it.DispatchedAt = w.Name, now
			w.InFlight[it.Inv.InvocationID] = it
			w.IdleSince = time.Time{}
			out = append(out, Assignment{Item: it, Worker: w.Name, Namespace: w.Namespace, Attempt: it.Attempt})
		}
		p.Queue = rest
	}
	return out
}

// LeastLoaded picks the dispatchable worker with the lowest load ratio
// (ties: fewer in flight, then name, for determinism).
func LeastLoaded(ws []*Worker, now time.Time) *Worker {
	var best *Worker
	for _, w := range ws {
		if !w.Dispatchable(now) {
			continue
		}
		if best == nil {
			best = w
			continue
		}
		l, b := len(w.InFlight)*best.Concurrency, len(best.InFlight)*w.Concurrency
		if l < b || (l == b && (len(w.InFlight) < len(best.InFlight) || (len(w.InFlight) == len(best.InFlight) && w.Name < best.Name))) {
			best = w
		}
	}
	return best
}

// Dispatched records the stream sequence of attempt's Dispatch.
func (s *State) Dispatched(it *Item, attempt int, seq uint64) {
	if it.Attempt == attempt {
		it.DispatchSeq = seq
	}
}

// Requeue takes it off worker and puts it back at the head of its pool's
// queue after delay (a failed Record write or publish).
func (s *State) Requeue(it *Item, worker string, delay time.Duration) {
	now := s.clk.Now()
	p := s.Pool(it.Inv.Pool)
	if w := p.Workers[worker]; w != nil {
		w.take(it.Inv.InvocationID, now)
	}
	if s.items[it.Inv.InvocationID] != it || it.Queued {
		return
	}
	it.Worker, it.Queued, it.NotBefore = "", true, now.Add(delay)
	p.Queue = append([]*Item{it}, p.Queue...)
}

// Forget drops it (cancelled, finished elsewhere, superseded) and reports
// whether it was still open.
func (s *State) Forget(it *Item, worker string) bool {
	it.Done.Store(true)
	if s.items[it.Inv.InvocationID] != it {
		return false
	}
	s.forget(it.Inv.InvocationID, it.Inv.Pool, worker)
	return true
}

// forget removes id from the open set, from the workers that hold it
// (worker, or any when "") and from its pool's queue.
func (s *State) forget(id, pool, worker string) {
	now := s.clk.Now()
	p := s.Pool(pool)
	it := s.items[id]
	delete(s.items, id)
	for _, w := range p.Workers {
		if _, ok := w.InFlight[id]; ok && (worker == "" || w.Name == worker || it == nil || w.Name == it.Worker) {
			w.take(id, now)
		}
	}
	if it != nil && it.Queued {
		q := p.Queue[:0]
		for _, x := range p.Queue {
			if x != it {
				q = append(q, x)
			}
		}
		p.Queue = q
	}
}

// Superseded names an attempt running elsewhere than the worker whose
// result finished its invocation: it is to be cancelled.
type Superseded struct {
	Namespace, Pool, Worker, InvocationID string
	Attempt                               int
}

// Result applies a worker's result delivered at stream sequence seq: the
// invocation is closed and the worker's slot freed. It returns the open
// item (nil if none) and the attempt to cancel, if a newer one runs
// elsewhere.
func (s *State) Result(res messages.Result, seq uint64) (*Item, *Superseded) {
	now := s.clk.Now()
	s.NoteResultSeq(seq)
	it := s.items[res.InvocationID]
	var other *Superseded
	if it != nil {
		it.Done.Store(true)
		if it.Worker != "" && it.Worker != res.Worker {
			other = &Superseded{Namespace: it.Inv.Namespace, Pool: it.Inv.Pool, Worker: it.Worker, InvocationID: res.InvocationID, Attempt: it.Attempt}
		}
	}
	if w := s.Pool(res.Pool).Workers[res.Worker]; w != nil {
		w.LastSeen = now
		w.take(res.InvocationID, now)
	}
	s.forget(res.InvocationID, res.Pool, "")
	return it, other
}
