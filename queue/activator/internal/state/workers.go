package state

import (
	"sort"
	"time"

	"github.com/runplane/runplane/internal/messages"
)

// Loss is a lost worker's open invocations, to be settled (Settle) once
// the results it stored before it went have been seen.
type Loss struct {
	Namespace, Pool, Worker, Why string
	// Clean: the worker said it had nothing in flight (a clean
	// deregistration), so what it still held it never started.
	Clean bool
	Items []*Item
}

// EventOutcome is what a worker Event changed.
type EventOutcome struct {
	// Started is the invocation whose start the Event reports (to be
	// recorded as running), nil if none or not current.
	Started *Item
	// Ready: the worker just became able to take work.
	Ready bool
	// Lost: the worker deregistered with invocations open.
	Lost *Loss
	// Gone: the worker deregistered.
	Gone bool
}

// Event applies a sidecar Event.
func (s *State) Event(ev messages.Event) EventOutcome {
	now := s.clk.Now()
	p := s.Pool(ev.Pool)
	w := p.Workers[ev.Worker]
	if ev.Type == messages.EventDeregistered {
		out := EventOutcome{Gone: true}
		if w != nil {
			// inFlight 0: the worker finished all it started (its results
			// are in the stream before this event); what it still holds
			// here it never started.
			out.Lost = s.lose(p, w, "deregistered", ev.InFlight == 0)
		}
		return out
	}
	if w == nil {
		w = s.newWorker(ev.Worker, ev.Pool, ev.Namespace)
		w.IdleSince = now
		p.Workers[ev.Worker] = w
	}
	wasReady := w.Registered && w.Ready
	w.Registered, w.LastSeen, w.Namespace = true, now, ev.Namespace
	if ev.Concurrency > 0 {
		w.Concurrency = ev.Concurrency
	}
	switch ev.Type {
	case messages.EventRegistered, messages.EventHeartbeat:
		w.Ready, w.Draining = ev.Ready, ev.Draining
		if w.IdleSince.IsZero() && len(w.InFlight) == 0 {
			w.IdleSince = now
		}
	}
	out := EventOutcome{Ready: w.Registered && w.Ready && !wasReady}
	// A started event of an invocation not tracked (any more) changes
	// nothing: its result is in, or it belongs to an older attempt.
	if ev.Type == messages.EventStarted && ev.InvocationID != "" {
		if it := s.items[ev.InvocationID]; it != nil && it.Attempt == ev.Attempt && it.Worker == ev.Worker {
			it.Started = true
			out.Started = it
		}
	}
	return out
}

// PodSeen applies the informer's view of a pool's Pod. gone: deleted or
// finished. It returns the Loss of a Pod that went with work open, and
// whether the dispatcher should look again.
func (s *State) PodSeen(pool, name, namespace string, concurrency int, pod Pod, gone bool) (lost *Loss, poke bool) {
	p := s.Pool(pool)
	w := p.Workers[name]
	if gone {
		if w != nil {
			lost = s.lose(p, w, "pod gone", false)
		}
		return lost, true
	}
	if w == nil {
		w = s.newWorker(name, pool, namespace)
		w.LastSeen = s.clk.Now()
		if concurrency > 0 {
			w.Concurrency = concurrency
		}
		p.Workers[name] = w
	}
	w.Namespace = namespace
	w.Pod = &pod
	return nil, pod.Terminating
}

// lose removes a worker; its current invocations are neither queued nor
// on a worker until Settle decides on them.
func (s *State) lose(p *Pool, w *Worker, why string, clean bool) *Loss {
	delete(p.Workers, w.Name)
	ids := make([]string, 0, len(w.InFlight))
	for id, it := range w.InFlight {
		if s.items[id] == it && it.Worker == w.Name {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	l := &Loss{Namespace: w.Namespace, Pool: p.Name, Worker: w.Name, Why: why, Clean: clean}
	for _, id := range ids {
		it := w.InFlight[id]
		it.Worker = ""
		l.Items = append(l.Items, it)
	}
	if len(l.Items) == 0 && !w.Registered {
		return nil
	}
	return l
}

// Settling reports whether it still awaits Settle's decision, and whether
// its worker had reported it started.
func (s *State) Settling(it *Item) (live, started bool) {
	return s.items[it.Inv.InvocationID] == it && !it.Done.Load() && !it.Queued && it.Worker == "", it.Started
}

// Verdict is what Settle decided for one invocation of a lost worker.
type Verdict int

const (
	// Skip: closed or taken care of meanwhile.
	Skip Verdict = iota
	// Redeliver: queued again at the head of its pool's queue.
	Redeliver
	// DeadLetter: out of attempts; no longer open.
	DeadLetter
)

// Settle decides on an invocation of a lost worker still open after its
// Record was checked. strike: the loss counts towards MaxAttempts (the
// worker may have run it). A redelivery waits Backoff(strikes) after a
// strike and returns the abandoned attempt's Dispatch sequence, to delete.
func (s *State) Settle(it *Item, strike bool) (v Verdict, staleDispatch uint64) {
	if live, _ := s.Settling(it); !live {
		return Skip, 0
	}
	now := s.clk.Now()
	if strike {
		it.Strikes++
	}
	if it.Strikes >= s.cfg.MaxAttempts {
		delete(s.items, it.Inv.InvocationID)
		it.Done.Store(true)
		return DeadLetter, 0
	}
	it.Queued, it.Started, it.NotBefore = true, false, now
	if strike {
		it.NotBefore = now.Add(s.Backoff(it.Strikes))
	}
	p := s.Pool(it.Inv.Pool)
	p.Queue = append([]*Item{it}, p.Queue...)
	stale := it.DispatchSeq
	it.DispatchSeq = 0
	return Redeliver, stale
}

// Backoff is the redelivery delay after strikes losses.
func (s *State) Backoff(strikes int) time.Duration {
	d := s.cfg.Backoff
	for i := 1; i < strikes && d < s.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, s.cfg.MaxBackoff)
}
