package state

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

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
	// HandedBack is the invocation the worker handed back unstarted (it
	// is queued again at once); StaleDispatch its abandoned Dispatch's
	// stream sequence (0: unknown), to delete.
	HandedBack    *Item
	StaleDispatch uint64
	// Unadmitted: RequirePods is set and no admitted Pod is this worker;
	// the Event was held, not applied. NewlyHeld: first such Event of the
	// worker within HeartbeatTimeout (to log once).
	Unadmitted, NewlyHeld bool
}

type pendingEvent struct {
	ev messages.Event
	at time.Time
}

// Event applies a sidecar Event of worker ev.Worker of pool
// ev.Namespace/ev.Pool (the caller checked them against the subject).
func (s *State) Event(ev messages.Event) EventOutcome {
	now := s.clk.Now()
	p := s.Pool(Key(ev.Namespace, ev.Pool))
	w := p.Workers[ev.Worker]
	if w == nil && s.cfg.RequirePods {
		k := Key(Key(ev.Namespace, ev.Pool), ev.Worker)
		_, held := s.pending[k]
		if ev.Type == messages.EventDeregistered {
			delete(s.pending, k)
		} else if held || len(s.pending) < MaxPending {
			s.pending[k] = pendingEvent{ev: ev, at: now}
		}
		if len(p.Workers) == 0 && len(p.Queue) == 0 {
			delete(s.pools, Key(ev.Namespace, ev.Pool)) // no state for pools nobody serves
		}
		return EventOutcome{Unadmitted: true, NewlyHeld: !held}
	}
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
	wasReady := w.Registered && w.Ready && !w.Silent
	w.Registered, w.LastSeen, w.Silent = true, now, false
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
	if ev.Type == messages.EventHandedBack && ev.InvocationID != "" {
		out.HandedBack, out.StaleDispatch = s.handBack(p, w, ev, now)
	}
	// A started event of an invocation not tracked (any more) changes
	// nothing: its result is in, or it belongs to an older attempt.
	if ev.Type == messages.EventStarted && ev.InvocationID != "" {
		if it := s.items[Key(ev.Namespace, ev.InvocationID)]; it != nil && it.Attempt == ev.Attempt && it.Worker == ev.Worker {
			it.Started = true
			out.Started = it
		}
	}
	return out
}

// PodSeen applies the informer's view of a Pod of pool namespace/pool: the
// caller admits only Pods in the pool's namespace owned by its workload,
// and reports as gone one that is deleted, finished or no longer admitted.
// It returns the Loss of a Pod that went with work open, and whether the
// dispatcher should look again.
func (s *State) PodSeen(pool, name, namespace string, concurrency int, pod Pod, gone bool) (lost *Loss, poke bool) {
	pk := Key(Key(namespace, pool), name)
	if gone {
		delete(s.pending, pk)
		// A refused or finished Pod creates no pool: Pods labelled with
		// made-up pool names would otherwise leave state (and a status
		// published every few seconds) behind for ever.
		p := s.pools[Key(namespace, pool)]
		if p == nil {
			return nil, false
		}
		if w := p.Workers[name]; w != nil {
			lost = s.lose(p, w, "pod gone", false)
		}
		return lost, true
	}
	p := s.Pool(Key(namespace, pool))
	w := p.Workers[name]
	if w == nil {
		w = s.newWorker(name, pool, namespace)
		w.LastSeen = s.clk.Now()
		if concurrency > 0 {
			w.Concurrency = concurrency
		}
		w.Pod = &pod
		p.Workers[name] = w
		if pe, ok := s.pending[pk]; ok {
			// The sidecar registered before its Pod was admitted.
			delete(s.pending, pk)
			out := s.Event(pe.ev)
			return nil, out.Ready || pod.Terminating
		}
		return nil, pod.Terminating
	}
	w.Pod = &pod
	return nil, pod.Terminating
}

// lose removes a worker; its current invocations are neither queued nor
// on a worker until Settle decides on them.
func (s *State) lose(p *Pool, w *Worker, why string, clean bool) *Loss {
	delete(p.Workers, w.Name)
	ids := make([]string, 0, len(w.InFlight))
	for id, it := range w.InFlight {
		if s.items[Key(p.Namespace, id)] == it && it.Worker == w.Name {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	l := &Loss{Namespace: p.Namespace, Pool: p.Name, Worker: w.Name, Why: why, Clean: clean}
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
	return s.items[ItemKey(it.Inv)] == it && !it.Done.Load() && !it.Queued && it.Worker == "", it.Started
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
		delete(s.items, ItemKey(it.Inv))
		it.Done.Store(true)
		return DeadLetter, 0
	}
	it.Queued, it.Started, it.NotBefore = true, false, now
	if strike {
		it.NotBefore = now.Add(s.Backoff(it.Strikes))
	}
	p := s.Pool(PoolKey(it.Inv))
	p.Queue = append([]*Item{it}, p.Queue...)
	stale := it.DispatchSeq
	it.DispatchSeq = 0
	return Redeliver, stale
}

// Backoff is the redelivery delay after strikes losses.
func (s *State) Backoff(strikes int) time.Duration {
	b := wait.Backoff{Duration: s.cfg.Backoff, Factor: 2, Cap: s.cfg.MaxBackoff, Steps: strikes - 1}
	for b.Steps > 0 {
		b.Step()
	}
	return min(b.Duration, s.cfg.MaxBackoff)
}

// handBack queues again, at the head of its pool's queue and at once, the
// current attempt that worker w says it gave back unstarted: it does not
// count as run (no strike, no retry). Anything else (another worker's or
// an older attempt, already settled) is ignored.
func (s *State) handBack(p *Pool, w *Worker, ev messages.Event, now time.Time) (*Item, uint64) {
	it := s.items[Key(ev.Namespace, ev.InvocationID)]
	if it == nil || it.Attempt != ev.Attempt || it.Worker != w.Name || it.Queued || it.Done.Load() {
		return nil, 0
	}
	w.take(ev.InvocationID, now)
	it.Worker, it.Queued, it.Started, it.NotBefore = "", true, false, now
	stale := it.DispatchSeq
	it.DispatchSeq = 0
	p.Queue = append([]*Item{it}, p.Queue...)
	return it, stale
}
