package state

import (
	"container/heap"
	"time"
)

// Finished work leaves the invocation stream in batches (issue 33): per
// subject, one purge of every message below the lowest sequence still held
// there, instead of one delete per message. The state knows, per subject,
// which sequences are held — an open invocation's message, each Dispatch
// of it, a Dispatch whose publish has not answered yet — and which were
// released as removable (their invocation's Record is final). A purge
// removes every message of the subject below its floor, including
// messages this state never saw: only the activator publishes Dispatches
// (a publish in flight holds a placeholder below any sequence it can get),
// and an invoke subject's floor is also bounded by the invoke consumer's
// ack floor (every invocation message at or below it was delivered and
// either queued here, held, found final or a copy, or is still marked
// delivered: Delivered).

// Subject is one subject of the invocation stream whose messages the state
// tracks: a pool's invoke subject (Worker "") or a worker's dispatch
// subject.
type Subject struct {
	Namespace, Pool, Worker string
}

// Invoke reports whether s is a pool's invoke subject.
func (s Subject) Invoke() bool { return s.Worker == "" }

// Hold is one stream message an invocation needs until its Record is
// final.
type Hold struct {
	Subject Subject
	Seq     uint64
}

// FallbackAfter is how long a removable message may wait behind a held
// one below it on its subject (a long-running invocation dispatched before
// it) before it is deleted on its own: the stream is not left holding a
// pool's finished work for as long as its slowest invocation runs.
const FallbackAfter = time.Second

// Purge is one subject's batch: purge its messages below Below (0: none),
// and delete Delete one by one (removable messages above a held one that
// have waited FallbackAfter). Removed counts the removable messages it
// takes away.
type Purge struct {
	Subject Subject
	Below   uint64
	Delete  []uint64
	Removed int
}

type released struct {
	seq uint64
	at  time.Time
}

// subjectFloor is what the state knows of one subject. Three kinds of
// sequence hold it, apart because they end apart: a stored message an open
// invocation needs (held), a lower bound of where a Dispatch publish in
// flight will be stored (placeholders: no message is known there, and the
// sweep may remove a real one at the same sequence), and an invocation
// message the invoke consumer delivered that is not acked yet (delivered:
// a Record read pending, or naked and due again; issue 33 review M1).
type subjectFloor struct {
	held         map[uint64]int // sequence → holders
	placeholders map[uint64]int // sequence → publishes in flight
	delivered    map[uint64]bool
	low          seqHeap // the sequences above, lazily: a top no longer held is dropped
	// removable are sequences released since the last purge, in release
	// order.
	removable []released
}

// seqHeap is a min-heap of sequences (container/heap).
type seqHeap []uint64

func (h seqHeap) Len() int           { return len(h) }
func (h seqHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h seqHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *seqHeap) Push(x any)        { *h = append(*h, x.(uint64)) }
func (h *seqHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// live reports whether anything holds seq.
func (f *subjectFloor) live(seq uint64) bool {
	return f.held[seq] > 0 || f.placeholders[seq] > 0 || f.delivered[seq]
}

// lowest is the lowest held sequence (0: none).
func (f *subjectFloor) lowest() uint64 {
	for f.low.Len() > 0 {
		if top := f.low[0]; f.live(top) {
			return top
		}
		heap.Pop(&f.low)
	}
	return 0
}

// compactAt is the heap size from which push rebuilds it when most of it
// is released sequences: behind one long hold at its top the lazy drop in
// lowest never reaches them (review M3: 100k entries after 100k holds).
const compactAt = 64

// push adds seq to the heap, and rebuilds the heap from what is live when
// it holds more than twice that: amortised O(log n) per push, the heap
// bounded by twice the live sequences.
func (f *subjectFloor) push(seq uint64) {
	heap.Push(&f.low, seq)
	n := len(f.held) + len(f.placeholders) + len(f.delivered)
	if len(f.low) < compactAt || len(f.low) <= 2*n {
		return
	}
	low := make(seqHeap, 0, 2*n)
	for _, m := range []map[uint64]int{f.held, f.placeholders} {
		for seq := range m {
			low = append(low, seq)
		}
	}
	for seq := range f.delivered {
		low = append(low, seq)
	}
	heap.Init(&low)
	f.low = low
}

func (s *State) subject(sub Subject) *subjectFloor {
	f := s.floors[sub]
	if f == nil {
		f = &subjectFloor{held: map[uint64]int{}, placeholders: map[uint64]int{}, delivered: map[uint64]bool{}}
		s.floors[sub] = f
	}
	return f
}

// hold notes that the stored message seq of sub is needed: a real
// sequence, the only kind that raises seen (Publishing).
func (s *State) hold(h Hold) {
	f := s.subject(h.Subject)
	if f.held[h.Seq]++; f.held[h.Seq] == 1 {
		f.push(h.Seq)
	}
	s.seen = max(s.seen, h.Seq)
}

// unhold drops one holder of h; removable: its invocation is final, so
// the message may go.
func (s *State) unhold(h Hold, removable bool) {
	f := s.subject(h.Subject)
	decr(f.held, h.Seq)
	if removable {
		f.removable = append(f.removable, released{seq: h.Seq, at: s.clk.Now()})
	}
	s.tidy(h.Subject, f)
}

// decr drops one count of seq from m.
func decr(m map[uint64]int, seq uint64) {
	if n := m[seq]; n > 1 {
		m[seq] = n - 1
	} else {
		delete(m, seq)
	}
}

// tidy forgets a subject nothing is known of any more (worker subjects
// come and go with their Pods).
func (s *State) tidy(sub Subject, f *subjectFloor) {
	if len(f.held) == 0 && len(f.placeholders) == 0 && len(f.delivered) == 0 && len(f.removable) == 0 {
		delete(s.floors, sub)
	}
}

// Delivered notes that the invoke consumer delivered the invocation
// message seq of sub and it is not acked yet: the consumer's ack floor
// may pass it without an ack (nats-server drops a message that reached
// MaxDeliver from pending and moves the floor past it), so until it is
// handled (Handled) it holds its subject like an open invocation's.
func (s *State) Delivered(sub Subject, seq uint64) {
	f := s.subject(sub)
	if !f.delivered[seq] {
		f.delivered[seq] = true
		f.push(seq)
	}
	s.seen = max(s.seen, seq)
}

// Handled notes that the invocation message seq of sub (Delivered) is
// being acked or termed: queued and held (Enqueue), a copy, final, or
// malformed.
func (s *State) Handled(sub Subject, seq uint64) {
	f := s.floors[sub]
	if f == nil {
		return
	}
	delete(f.delivered, seq)
	s.tidy(sub, f)
}

// InvokeSubject is the subject of it's invocation message.
func InvokeSubject(it *Item) Subject {
	return Subject{Namespace: it.Inv.Namespace, Pool: it.Inv.Pool}
}

// DispatchSubject is the subject of it's Dispatches to worker.
func DispatchSubject(it *Item, worker string) Subject {
	return Subject{Namespace: it.Inv.Namespace, Pool: it.Inv.Pool, Worker: worker}
}

// holdFor notes that it needs h until it is final; a message of an
// invocation already final is removable at once (a Dispatch whose publish
// answered after its result came).
func (s *State) holdFor(it *Item, h Hold) {
	if it.final {
		s.subject(h.Subject).removable = append(s.subject(h.Subject).removable, released{seq: h.Seq, at: s.clk.Now()})
		s.seen = max(s.seen, h.Seq)
		return
	}
	s.hold(h)
	it.holds = append(it.holds, h)
}

// Publishing notes that a Dispatch of it to worker is being published:
// until Dispatched or PublishFailed, its subject is held from just above
// the highest stream sequence seen so far, below any sequence the publish
// can get (the stream numbers messages in the order it stores them, and
// every sequence seen was stored before this publish was sent).
//
// A placeholder is no stored sequence and does not raise seen: if it did,
// consecutive publishes would take placeholders above sequences the
// earlier ones can still get (a publish retried after a lost PubAck is
// stored late), and a purge below a later placeholder would take them
// (review H1).
func (s *State) Publishing(it *Item, worker string) Hold {
	h := Hold{Subject: DispatchSubject(it, worker), Seq: s.seen + 1}
	f := s.subject(h.Subject)
	if f.placeholders[h.Seq]++; f.placeholders[h.Seq] == 1 {
		f.push(h.Seq)
	}
	return h
}

// PublishFailed drops the placeholder of a Dispatch publish that stored
// nothing.
func (s *State) PublishFailed(placeholder Hold) { s.unplace(placeholder) }

// unplace drops one publish's placeholder.
func (s *State) unplace(placeholder Hold) {
	f := s.subject(placeholder.Subject)
	decr(f.placeholders, placeholder.Seq)
	s.tidy(placeholder.Subject, f)
}

// Dispatched records the stream sequence of attempt's Dispatch, published
// under placeholder (Publishing).
func (s *State) Dispatched(it *Item, attempt int, placeholder Hold, seq uint64) {
	s.holdFor(it, Hold{Subject: placeholder.Subject, Seq: seq})
	s.unplace(placeholder)
	if it.Attempt == attempt {
		it.DispatchSeq = seq
	}
}

// Found records a Dispatch of it to worker found in the stream at seq (a
// previous leader published it).
func (s *State) Found(it *Item, worker string, seq uint64) {
	s.holdFor(it, Hold{Subject: DispatchSubject(it, worker), Seq: seq})
}

// Final releases it's messages known here — its invocation's, each
// Dispatch's — as removable once its Record is final, and returns them: a
// second call returns none, and a Dispatch noted later is removable at
// once.
func (s *State) Final(it *Item) []Hold {
	holds := it.holds
	it.holds, it.final = nil, true
	for _, h := range holds {
		s.unhold(h, true)
	}
	return holds
}

// Swept notes that the sweep removed the message seq of sub (its
// invocation's Record is final or gone): no open invocation needs it. A
// placeholder at the same sequence stays: it stands for a publish in
// flight, not for that message.
func (s *State) Swept(sub Subject, seq uint64) {
	f := s.floors[sub]
	if f == nil {
		return
	}
	delete(f.held, seq)
	s.tidy(sub, f)
}

// Purges are the batches due (Purge): for each subject with removable
// messages, its floor — the lowest sequence still held there, else just
// above its highest removable one, and for an invoke subject never above
// invokeAckFloor+1 (the invoke consumer's ack floor: 0 when unknown) — and
// the removable messages above the floor that have waited FallbackAfter.
// Nothing changes until Purged.
func (s *State) Purges(invokeAckFloor uint64) []Purge {
	now := s.clk.Now()
	var out []Purge
	for sub, f := range s.floors {
		if len(f.removable) == 0 {
			continue
		}
		var top uint64
		for _, r := range f.removable {
			top = max(top, r.seq)
		}
		floor := top + 1
		if low := f.lowest(); low != 0 && low < floor {
			floor = low
		}
		if sub.Invoke() && invokeAckFloor+1 < floor {
			floor = invokeAckFloor + 1
		}
		p := Purge{Subject: sub}
		for _, r := range f.removable {
			switch {
			case r.seq < floor:
				p.Below = floor
				p.Removed++
			case now.Sub(r.at) >= FallbackAfter && f.held[r.seq] == 0 && !f.delivered[r.seq]:
				p.Delete = append(p.Delete, r.seq)
				p.Removed++
			}
		}
		if p.Removed > 0 {
			out = append(out, p)
		}
	}
	return out
}

// Purged notes that p was carried out: its messages are gone.
func (s *State) Purged(p Purge) {
	f := s.floors[p.Subject]
	if f == nil {
		return
	}
	gone := make(map[uint64]bool, len(p.Delete))
	for _, seq := range p.Delete {
		gone[seq] = true
	}
	rest := f.removable[:0]
	for _, r := range f.removable {
		if r.seq >= p.Below && !gone[r.seq] {
			rest = append(rest, r)
		}
	}
	f.removable = rest
	s.tidy(p.Subject, f)
}

// Removable reports whether some released message still waits for a purge.
func (s *State) Removable() bool {
	for _, f := range s.floors {
		if len(f.removable) > 0 {
			return true
		}
	}
	return false
}

// InvokeRemovableAbove reports whether an invoke subject has a removable
// message above seq (a purge of it needs a newer ack floor).
func (s *State) InvokeRemovableAbove(seq uint64) bool {
	for sub, f := range s.floors {
		if !sub.Invoke() {
			continue
		}
		for _, r := range f.removable {
			if r.seq > seq {
				return true
			}
		}
	}
	return false
}
