package state

import (
	"sort"
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

// Accept notes that the invoke consumer delivered seq of inv's pool (it
// holds its subject until Handled or Enqueue) and reports whether inv is
// already open.
func (s *State) Accept(inv messages.Invocation, seq uint64) (known bool) {
	p := s.Pool(PoolKey(inv))
	p.SeenSeq = max(p.SeenSeq, seq)
	s.Delivered(Subject{Namespace: inv.Namespace, Pool: inv.Pool}, seq)
	_, known = s.items[ItemKey(inv)]
	return known
}

// Copy reports whether the invocation message at seq is a second copy of
// an invocation open here (a re-post after the duplicate window publishes
// one: ingress duplicate), which only this knows to delete: the final
// delete knows the item's own message, and the sweep skips open
// invocations. A redelivery of the item's own message is no copy, nor is
// any message of an item whose own is not known.
func (s *State) Copy(inv messages.Invocation, seq uint64) bool {
	it := s.items[ItemKey(inv)]
	return it != nil && it.Seq != 0 && it.Seq != seq
}

// Enqueue queues it unless its invocation is open already.
func (s *State) Enqueue(it *Item) bool {
	if _, known := s.items[ItemKey(it.Inv)]; known {
		return false
	}
	it.Queued = true
	s.items[ItemKey(it.Inv)] = it
	if it.Seq != 0 {
		s.holdFor(it, Hold{Subject: InvokeSubject(it), Seq: it.Seq})
		s.Handled(InvokeSubject(it), it.Seq)
	}
	p := s.Pool(PoolKey(it.Inv))
	if len(p.Queue) >= FullItems {
		it.Lighten()
	}
	p.Queue = append(p.Queue, it)
	return true
}

// FullItems is how many queued invocations of a pool keep their payload in
// memory; the ones behind them are Light. Measured (test/chaos TestBacklog,
// 100,000 queued 1 KiB invocations): 440 MiB with every payload held,
// about 4 KiB per invocation; a Light one holds only its names, times and
// sequence, whatever its payload's size.
const FullItems = 64

// Lighten drops what the stream keeps of it: its payload, headers and
// attributes, and the cached Record — read again at dispatch, unless it is
// the Record the ingress created (FromIngress): then its revision and the
// two fields the invocation does not hold are kept (about 100 bytes), and
// Unlighten makes it again without a read. Only an invocation with a known
// stream sequence is lightened.
func (it *Item) Lighten() {
	if it.Seq == 0 {
		return
	}
	it.Inv.Payload, it.Inv.Headers, it.Inv.Attributes = nil, nil, nil
	if it.ingressRec && it.Rec.Rev != 0 {
		r := it.Rec.Record
		it.created = &created{rev: it.Rec.Rev, stream: r.Stream, requestHash: r.RequestHash, streamBytes: r.StreamBytes}
	}
	it.Rec = messages.Cached{}
	it.Light = true
}

// created is what Lighten keeps of the Record the ingress created.
type created struct {
	rev                 uint64
	stream, requestHash string
	streamBytes         int64
}

// IngressRecord is the Record the ingress created for inv at revision rev
// (queue/ingress accept: stream, requestHash and the stored message's
// streamBytes; a Record with a callback is not, the ingress sends no
// revision for it): the activator's copy of a Record it did not read.
func IngressRecord(inv messages.Invocation, rev uint64, stream, requestHash string, streamBytes int64) messages.Cached {
	return messages.Cached{Rev: rev, Record: messages.Record{InvocationID: inv.InvocationID, Namespace: inv.Namespace, Pool: inv.Pool,
		Mode: inv.Mode, State: messages.StateQueued, Stream: stream, RequestHash: requestHash, AcceptedAt: inv.AcceptedAt,
		UpdatedAt: inv.AcceptedAt, NamespaceUID: inv.NamespaceUID, StreamBytes: streamBytes}}
}

// FromIngress sets it's cached Record to the one the ingress created
// (IngressRecord), which Lighten may then drop and Unlighten make again.
func (it *Item) FromIngress(rev uint64, stream, requestHash string, streamBytes int64) {
	it.Rec = IngressRecord(it.Inv, rev, stream, requestHash, streamBytes)
	it.ingressRec = true
}

// Unlighten makes a Light item's cached Record again when it was the
// ingress's (FromIngress), under WriteMu before its first write; otherwise
// Rec stays as it is (empty: the write reads the Record first).
func (it *Item) Unlighten() {
	if c := it.created; c != nil && it.Rec.Rev == 0 {
		it.Rec = IngressRecord(it.Inv, c.rev, c.stream, c.requestHash, c.streamBytes)
	}
	it.created, it.ingressRec = nil, false
}

// Dispatchable reports whether w may take one more invocation at now.
func (w *Worker) Dispatchable(now time.Time) bool {
	return w.Registered && w.Ready && !w.Draining && !w.Silent && now.After(w.DrainUntil) &&
		(w.Pod == nil || !w.Pod.Terminating) && len(w.InFlight) < w.Concurrency
}

// Dispatch assigns queued invocations whose backoff is over to the
// least-loaded dispatchable workers, in queue order within a pool, never
// beyond a pool's MaxInFlight or its namespace's NamespaceMaxInFlight (the
// rest stays queued). Pools are served in an order that rotates on every
// call, and the assignments are interleaved round-robin across namespaces,
// so the I/O of one namespace's burst is never queued ahead of another's
// and no pool of a capped namespace always goes first.
func (s *State) Dispatch() []Assignment {
	now := s.clk.Now()
	nsInFlight := map[string]int{}
	inFlight := map[*Pool]int{}
	var ready []*Pool
	for _, p := range s.pools {
		n := p.InFlight()
		inFlight[p] = n
		nsInFlight[p.Namespace] += n
		if len(p.Queue) > 0 {
			ready = append(ready, p)
		}
	}
	if len(ready) == 0 {
		return nil
	}
	sort.Slice(ready, func(i, j int) bool {
		if ready[i].Namespace != ready[j].Namespace {
			return ready[i].Namespace < ready[j].Namespace
		}
		return ready[i].Name < ready[j].Name
	})
	s.turn++
	first := s.turn % len(ready)
	ready = append(ready[first:], ready[:first]...)
	var order []string
	byNS := map[string][]Assignment{}
	for _, p := range ready {
		room := -1 // unbounded
		if p.MaxInFlight > 0 {
			room = max(p.MaxInFlight-inFlight[p], 0)
		}
		if m := s.cfg.Limits.NamespaceMaxInFlight; m > 0 {
			if r := max(m-nsInFlight[p.Namespace], 0); room < 0 || r < room {
				room = r
			}
		}
		as := s.dispatchPool(p, now, room)
		if len(as) == 0 {
			continue
		}
		nsInFlight[p.Namespace] += len(as)
		if byNS[p.Namespace] == nil {
			order = append(order, p.Namespace)
		}
		byNS[p.Namespace] = append(byNS[p.Namespace], as...)
	}
	var out []Assignment
	for i := 0; len(order) > 0; i++ {
		rest := order[:0]
		for _, ns := range order {
			if i < len(byNS[ns]) {
				out = append(out, byNS[ns][i])
				rest = append(rest, ns)
			}
		}
		order = rest
	}
	return out
}

// dispatchPool assigns up to room (< 0: any number) of p's queued
// invocations.
func (s *State) dispatchPool(p *Pool, now time.Time, room int) []Assignment {
	if room == 0 {
		return nil
	}
	var ws []*Worker
	for _, w := range p.Workers {
		if w.Dispatchable(now) {
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		return nil
	}
	var out []Assignment
	rest := p.Queue[:0]
	for i, it := range p.Queue {
		if it.NotBefore.After(now) {
			rest = append(rest, it)
			continue
		}
		w := LeastLoaded(ws, now)
		if w == nil || len(out) == room {
			rest = append(rest, p.Queue[i:]...)
			break
		}
		it.Queued, it.Started = false, false
		it.Attempt++
		it.Worker, it.DispatchedAt = w.Name, now
		if it.Dispatches == nil {
			it.Dispatches = map[int]string{}
		}
		it.Dispatches[it.Attempt] = w.Name
		w.InFlight[it.Inv.InvocationID] = it
		w.IdleSince = time.Time{}
		out = append(out, Assignment{Item: it, Worker: w.Name, Namespace: w.Namespace, Attempt: it.Attempt})
	}
	p.Queue = rest
	return out
}

// InFlight counts the invocations p's workers hold.
func (p *Pool) InFlight() int {
	n := 0
	for _, w := range p.Workers {
		n += len(w.InFlight)
	}
	return n
}

// SetMaxInFlight sets the in-flight bound of the pool named key (0:
// unbounded).
func (s *State) SetMaxInFlight(key string, n int) {
	p := s.Pool(key)
	p.MaxInFlight, p.LimitSet = n, true
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

// Requeue takes it off worker and puts it back at the head of its pool's
// queue after delay (a failed Record write or publish).
func (s *State) Requeue(it *Item, worker string, delay time.Duration) {
	now := s.clk.Now()
	p := s.Pool(PoolKey(it.Inv))
	if w := p.Workers[worker]; w != nil {
		w.take(it.Inv.InvocationID, now)
	}
	if s.items[ItemKey(it.Inv)] != it || it.Queued {
		return
	}
	it.Worker, it.Queued, it.NotBefore = "", true, now.Add(delay)
	p.Queue = append([]*Item{it}, p.Queue...)
}

// Forget drops it (cancelled, finished elsewhere, superseded) and reports
// whether it was still open.
func (s *State) Forget(it *Item, worker string) bool {
	it.Done.Store(true)
	if s.items[ItemKey(it.Inv)] != it {
		return false
	}
	s.forget(it.Inv.Namespace, it.Inv.InvocationID, it.Inv.Pool, worker)
	return true
}

// forget removes id of ns from the open set, from the workers of ns/pool
// that hold it (worker, or any when "") and from its pool's queue.
func (s *State) forget(ns, id, pool, worker string) {
	now := s.clk.Now()
	p := s.Pool(Key(ns, pool))
	it := s.items[Key(ns, id)]
	delete(s.items, Key(ns, id))
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

// Result refusal reasons (Refusal).
const (
	// RefusedOtherWorker: the attempt was dispatched to another worker.
	RefusedOtherWorker = "other_worker"
	// RefusedUnknownAttempt: no such attempt was dispatched.
	RefusedUnknownAttempt = "unknown_attempt"
	// RefusedToken: the result does not carry its Dispatch's ResultToken.
	RefusedToken = "token"
	// RefusedOtherPool: the invocation belongs to another pool of the
	// namespace than the result's subject.
	RefusedOtherPool = "other_pool"
)

// SetResultToken keeps token as the ResultToken of attempt of it, unless
// one is kept already, and returns the one kept.
func (s *State) SetResultToken(it *Item, attempt int, token string) string {
	if t, ok := it.Tokens[attempt]; ok {
		return t
	}
	if it.Tokens == nil {
		it.Tokens = map[int]string{}
	}
	it.Tokens[attempt] = token
	return token
}

// Refusal says why res must not be taken ("" when it may): a Result counts
// only from the worker its attempt was dispatched to — carrying the
// attempt's ResultToken when it is known, and naming that worker — so
// another worker of the pool cannot finish (or forge the answer of) an
// invocation it was not given. A result of an invocation that is not open
// is not judged here.
func (s *State) Refusal(res messages.Result) string {
	it := s.items[Key(res.Namespace, res.InvocationID)]
	switch {
	case it == nil:
		return ""
	case it.Inv.Pool != res.Pool:
		return RefusedOtherPool
	}
	if t, ok := it.Tokens[res.Attempt]; ok && t != res.ResultToken {
		return RefusedToken
	}
	if res.Attempt >= 1 && res.Attempt <= it.RetriedAttempt {
		return RefusedRetried
	}
	w, known := it.Dispatches[res.Attempt]
	switch {
	case known && w == res.Worker:
		return ""
	case known:
		return RefusedOtherWorker
	case res.Attempt >= 1 && res.Attempt <= it.Unverified:
		return "" // dispatched by a previous leader, to a worker not recorded
	default:
		return RefusedUnknownAttempt
	}
}

// Superseded names an attempt other than the one whose result finished its
// invocation: it is to be cancelled.
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
	it := s.items[Key(res.Namespace, res.InvocationID)]
	var other *Superseded
	if it != nil {
		it.Done.Store(true)
		// The late result of a superseded attempt wins; the current one is
		// cancelled wherever it runs — on another worker, or on the same
		// one (a worker declared lost that resumed and got it back).
		if it.Worker != "" && (it.Worker != res.Worker || it.Attempt != res.Attempt) {
			other = &Superseded{Namespace: it.Inv.Namespace, Pool: it.Inv.Pool, Worker: it.Worker, InvocationID: res.InvocationID, Attempt: it.Attempt}
		}
	}
	if w := s.Pool(Key(res.Namespace, res.Pool)).Workers[res.Worker]; w != nil {
		w.LastSeen = now
		w.take(res.InvocationID, now)
	}
	s.forget(res.Namespace, res.InvocationID, res.Pool, "")
	return it, other
}
