package state

import (
	"fmt"
	"sort"
	"time"

	"github.com/runplane/runplane/internal/messages"
)

// Expiry is an invocation closed on the activator's own authority: its
// Record is to be written timed_out, and Cancel sent to Worker if set.
type Expiry struct {
	Item   *Item
	Worker string
	Reason string
}

// Silence is a worker that just fell silent: it gets no new work, and what
// it holds is held for it until Until.
type Silence struct {
	Namespace, Pool, Worker string
	Held                    int
	Until                   time.Time
}

// Housekeep applies the periodic checks: workers silent for
// HeartbeatTimeout get no new work, and each invocation they hold is given
// up once its own hold is over (release); queued invocations past
// ttlSeconds and dispatched ones past timeoutSeconds (+ ExecutionGrace)
// expire.
func (s *State) Housekeep() (losses []*Loss, expired []Expiry, silenced []Silence) {
	now := s.clk.Now()
	for _, p := range s.pools {
		for _, w := range p.Workers {
			if now.Sub(w.LastSeen) <= s.cfg.HeartbeatTimeout.Duration || !(w.Registered || len(w.InFlight) > 0) {
				w.Silent = false
				continue
			}
			if until := s.holdUntil(w); now.Before(until) && !w.Silent {
				silenced = append(silenced, Silence{Namespace: p.Namespace, Pool: p.Name, Worker: w.Name, Held: len(w.InFlight), Until: until})
			}
			w.Silent = true
			if l := s.release(p, w, now); l != nil {
				losses = append(losses, l)
			}
		}
		q := p.Queue[:0]
		for _, it := range p.Queue {
			// ttlSeconds bounds the wait for a first dispatch; a retry
			// waits for its backoff instead.
			if it.Inv.TTLSeconds > 0 && it.Retries == 0 && now.After(it.Inv.AcceptedAt.Add(time.Duration(it.Inv.TTLSeconds)*time.Second)) {
				delete(s.items, ItemKey(it.Inv))
				it.Done.Store(true)
				expired = append(expired, Expiry{Item: it, Reason: fmt.Sprintf("not dispatched within ttlSeconds=%d", it.Inv.TTLSeconds)})
				continue
			}
			q = append(q, it)
		}
		p.Queue = q
		for _, w := range p.Workers {
			for id, it := range w.InFlight {
				if it.Inv.TimeoutSeconds <= 0 || it.DispatchedAt.IsZero() {
					continue
				}
				if now.After(it.DispatchedAt.Add(time.Duration(it.Inv.TimeoutSeconds)*time.Second + s.cfg.ExecutionGrace)) {
					delete(w.InFlight, id)
					delete(s.items, Key(p.Namespace, id))
					it.Done.Store(true)
					expired = append(expired, Expiry{Item: it, Worker: w.Name, Reason: fmt.Sprintf("no result within timeoutSeconds=%d", it.Inv.TimeoutSeconds)})
				}
			}
		}
	}
	for k, pe := range s.pending {
		if now.Sub(pe.at) > s.cfg.HeartbeatTimeout.Duration {
			delete(s.pending, k)
		}
	}
	return losses, expired, silenced
}

// heldUntil is when a silent worker's attempt of it stops being held for
// it: its deadline (timeoutSeconds + ExecutionGrace from its dispatch, by
// which its sidecar has stopped the call), capped by SilentHold. No
// deadline, or no hold: at once.
func (s *State) heldUntil(w *Worker, it *Item) time.Time {
	if s.cfg.SilentHold.Duration < 0 || it.Inv.TimeoutSeconds <= 0 || it.DispatchedAt.IsZero() {
		return time.Time{}
	}
	until := it.DispatchedAt.Add(time.Duration(it.Inv.TimeoutSeconds)*time.Second + s.cfg.ExecutionGrace)
	if s.cfg.SilentHold.Duration > 0 {
		if c := w.LastSeen.Add(s.cfg.HeartbeatTimeout.Duration + s.cfg.SilentHold.Duration); c.Before(until) {
			until = c
		}
	}
	return until
}

// holdUntil is the earliest release among what silent worker w holds.
func (s *State) holdUntil(w *Worker) time.Time {
	var until time.Time
	for _, it := range w.InFlight {
		if d := s.heldUntil(w, it); until.IsZero() || d.Before(until) {
			until = d
		}
	}
	return until
}

// release gives up what silent worker w holds whose hold is over, each on
// its own deadline (the rest stays w's: another attempt is still running
// there), and the worker itself once it holds nothing.
func (s *State) release(p *Pool, w *Worker, now time.Time) *Loss {
	var over []string
	for id, it := range w.InFlight {
		if !now.Before(s.heldUntil(w, it)) {
			over = append(over, id)
		}
	}
	if len(over) == len(w.InFlight) {
		return s.lose(p, w, "heartbeats stopped", false)
	}
	sort.Strings(over)
	l := &Loss{Namespace: p.Namespace, Pool: p.Name, Worker: w.Name, Why: "heartbeats stopped"}
	for _, id := range over {
		it := w.InFlight[id]
		delete(w.InFlight, id)
		if s.items[Key(p.Namespace, id)] == it && it.Worker == w.Name {
			it.Worker = ""
			l.Items = append(l.Items, it)
		}
	}
	if len(l.Items) == 0 {
		return nil
	}
	return l
}

// Unheard excuses every worker's silence up to now: the activator itself
// was cut from NATS, so it heard no one, and a worker is judged on its
// heartbeats only from the reconnect on (it gets a full HeartbeatTimeout
// to be heard again) — not declared lost, its work run a second time, for
// the activator's own outage.
func (s *State) Unheard() {
	now := s.clk.Now()
	for _, p := range s.pools {
		for _, w := range p.Workers {
			if w.LastSeen.Before(now) {
				w.LastSeen, w.Silent = now, false
			}
		}
	}
}

// Restore puts an open Record found at start back: queued, or in flight
// on its recorded worker (assumed alive until heartbeats say otherwise).
func (s *State) Restore(it *Item, r messages.Record) {
	s.items[ItemKey(it.Inv)] = it
	if it.Seq != 0 {
		s.holdFor(it, Hold{Subject: InvokeSubject(it), Seq: it.Seq})
	}
	p := s.Pool(PoolKey(it.Inv))
	p.SeenSeq = max(p.SeenSeq, it.Seq)
	it.Unverified = r.Attempt
	RestoreRetries(it, r)
	if (r.State != messages.StateDispatched && r.State != messages.StateRunning) || r.Worker == "" {
		it.Queued = true
		if len(p.Queue) >= FullItems {
			it.Lighten()
		}
		p.Queue = append(p.Queue, it)
		return
	}
	w := p.Workers[r.Worker]
	if w == nil {
		w = s.newWorker(r.Worker, it.Inv.Pool, it.Inv.Namespace)
		w.LastSeen = s.clk.Now()
		p.Workers[r.Worker] = w
	}
	it.Worker, it.DispatchedAt = r.Worker, r.UpdatedAt
	it.Dispatches, it.Unverified = map[int]string{r.Attempt: r.Worker}, r.Attempt-1
	// Strikes are not recorded; count every earlier attempt.
	it.Strikes = max(r.Attempt-1, 0)
	it.Started = r.State == messages.StateRunning
	w.InFlight[it.Inv.InvocationID] = it
}
