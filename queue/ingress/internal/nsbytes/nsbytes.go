// Package nsbytes counts what each namespace holds in the queue's shared
// store — the invocation stream and the Records bucket — from the Records
// themselves, as a watch of the bucket delivers them. Every ingress replica
// runs the same watch, so the replicas derive the same figures from the
// store, after a restart too; nothing is kept but what the store says.
//
// JetStream keeps no byte count per subject, so the count is the Records':
//   - the stream: an open (non-terminal) Record's invocation holds its
//     message and one Dispatch per attempt (Record.StreamBytes each); a
//     queued one not yet dispatched is counted for its first Dispatch too
//     (room it needs, taken at its accept), which also covers a re-post's
//     copy of its message while the activator has not removed it (one per
//     duplicate window);
//     finished invocations leave the stream (the activator deletes their
//     messages and clears StreamBytes), but a dead letter stays as long as
//     its Record; a Record the ingress made final (a cancel) counts until
//     the activator has removed its messages and cleared it;
//   - the bucket: each Record's stored size, until it expires (the bucket's
//     TTL after its last write). A Record still changing (open, or with a
//     callback to deliver) is counted at its latest size; a settled one is
//     added to a per-minute sum that goes when it expires, so memory is
//     per open invocation and per minute, never per settled Record.
//
// A settled Record written again (which nothing does) is counted twice
// until it expires: conservative.
package nsbytes

import (
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/runplane/runplane/internal/messages"
)

// RecordOverhead is what the bucket stores of a Record besides its value
// and key (subject prefix, headers, framing), about.
const RecordOverhead = 128

// Usage is every namespace's share of the store.
type Usage struct {
	clk clock.PassiveClock
	ttl time.Duration

	mu sync.Mutex
	ns map[string]*space
}

// New counts Records that expire ttl after their last write.
func New(clk clock.PassiveClock, ttl time.Duration) *Usage {
	return &Usage{clk: clk, ttl: ttl, ns: map[string]*space{}}
}

// space is one namespace's share.
type space struct {
	open         map[string]held // Record key → what it holds
	openStream   int64
	openRecords  int64
	settled      []expiring // oldest expiry first
	settledBytes held
	// reserved: accepts on this replica whose Records the watch has not
	// delivered yet, by Record key (with when they were reserved).
	reserved      map[string]expiring
	reservedBytes held
	openChecked   time.Time
}

// held is what one Record (or a sum of them) holds.
type held struct {
	stream, records int64
	expires         time.Time
}

type expiring struct {
	at time.Time
	held
}

// Total is a namespace's share: bytes in the stream and in the bucket.
type Total struct {
	Stream, Records int64
	// NextExpiry is when the earliest settled Record of the namespace
	// expires (zero when none): the bucket share shrinks then.
	NextExpiry time.Time
}

// Shape is what the count reads of a Record: decoding only it skips the
// result's bytes, which every replica's watch would otherwise decode for
// every Record write.
type Shape struct {
	State       messages.State `json:"state"`
	Attempt     int            `json:"attempt,omitempty"`
	StreamBytes int64          `json:"streamBytes,omitempty"`
	Callback    *struct {
		State messages.CallbackState `json:"state"`
		Start *struct {
			State messages.CallbackState `json:"state"`
		} `json:"start,omitempty"`
	} `json:"callback,omitempty"`
}

// ShapeOf is the Shape of a Record.
func ShapeOf(r messages.Record) Shape {
	sh := Shape{State: r.State, Attempt: r.Attempt, StreamBytes: r.StreamBytes}
	if cb := r.Callback; cb != nil {
		sh.Callback = &struct {
			State messages.CallbackState `json:"state"`
			Start *struct {
				State messages.CallbackState `json:"state"`
			} `json:"start,omitempty"`
		}{State: cb.State}
		if cb.Start != nil {
			sh.Callback.Start = &struct {
				State messages.CallbackState `json:"state"`
			}{State: cb.Start.State}
		}
	}
	return sh
}

// Put counts the Record r, stored under key with size bytes of value at
// created (its last write).
func (u *Usage) Put(key string, size int, created time.Time, r Shape) {
	ns := namespaceOf(key)
	h := held{records: int64(size+len(key)) + RecordOverhead, expires: created.Add(u.ttl)}
	if r.State == messages.StateDeadLettered {
		h.stream = r.StreamBytes // the dead letter
	} else {
		// Open, or final but not yet cleared by the activator (a cancel):
		// the message and each attempt's Dispatch (the first one's room
		// before it is published, or a re-post's copy).
		h.stream = r.StreamBytes * int64(1+max(r.Attempt, 1))
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	sp := u.space(ns)
	sp.drop(key)
	sp.unreserve(key, sp.reserved[key].held) // counted from its Record now
	if changing(r) {
		sp.open[key] = h
		sp.openStream += h.stream
		sp.openRecords += h.records
		return
	}
	sp.settle(h)
}

// Delete forgets the Record under key (deleted or purged). A settled
// Record's bytes stay counted until it would have expired: conservative.
func (u *Usage) Delete(key string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if sp := u.ns[namespaceOf(key)]; sp != nil {
		sp.drop(key)
	}
}

// Of is namespace ns's share now, with what is being accepted.
func (u *Usage) Of(ns string) Total {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.of(ns)
}

func (u *Usage) of(ns string) Total {
	sp := u.ns[ns]
	if sp == nil {
		return Total{}
	}
	sp.expire(u.clk.Now())
	t := Total{Stream: sp.openStream + sp.settledBytes.stream + sp.reservedBytes.stream,
		Records: sp.openRecords + sp.settledBytes.records + sp.reservedBytes.records}
	if len(sp.settled) > 0 {
		t.NextExpiry = sp.settled[0].at
	}
	return t
}

// Active is how many namespaces hold a share of the stream, and of the
// Records bucket, now.
func (u *Usage) Active() (stream, records int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for ns := range u.ns {
		t := u.of(ns)
		if t.Stream > 0 {
			stream++
		}
		if t.Records > 0 {
			records++
		}
	}
	return stream, records
}

// Reserve counts stream and records bytes for the accept of the Record
// key unless that takes its namespace past maxStream or maxRecords (0:
// unbounded); it returns the share before and whether it fits. The check
// and the count are one step: concurrent accepts cannot both take the
// last room. The reservation holds until the watch delivers the Record
// (Put), or release is called (the accept failed); one neither ever
// meets goes after reserveHold.
func (u *Usage) Reserve(key string, stream, records, maxStream, maxRecords int64) (Total, bool, func()) {
	ns := namespaceOf(key)
	u.mu.Lock()
	defer u.mu.Unlock()
	t := u.of(ns)
	if (maxStream > 0 && t.Stream+stream > maxStream) || (maxRecords > 0 && t.Records+records > maxRecords) {
		return t, false, func() {}
	}
	sp := u.space(ns)
	h := held{stream: stream, records: records}
	r := sp.reserved[key]
	r.at = u.clk.Now()
	r.stream += stream
	r.records += records
	sp.reserved[key] = r
	sp.reservedBytes.stream += stream
	sp.reservedBytes.records += records
	var once sync.Once
	return t, true, func() {
		once.Do(func() {
			u.mu.Lock()
			defer u.mu.Unlock()
			sp.unreserve(key, h)
		})
	}
}

// reserveHold bounds a reservation whose Record the watch never
// delivers (the watch broke): the share is then counted without it.
const reserveHold = time.Minute

// unreserve gives back h of the reservation for key, what is left of it
// at most (Put may have taken it already).
func (sp *space) unreserve(key string, h held) {
	r, ok := sp.reserved[key]
	if !ok {
		return
	}
	h.stream, h.records = min(h.stream, r.stream), min(h.records, r.records)
	r.stream -= h.stream
	r.records -= h.records
	sp.reservedBytes.stream -= h.stream
	sp.reservedBytes.records -= h.records
	if r.stream == 0 && r.records == 0 {
		delete(sp.reserved, key)
		return
	}
	sp.reserved[key] = r
}

func (u *Usage) space(ns string) *space {
	sp := u.ns[ns]
	if sp == nil {
		sp = &space{open: map[string]held{}, reserved: map[string]expiring{}}
		u.ns[ns] = sp
	}
	return sp
}

func (sp *space) drop(key string) {
	if h, ok := sp.open[key]; ok {
		delete(sp.open, key)
		sp.openStream -= h.stream
		sp.openRecords -= h.records
	}
}

// settleSlot: settled Records expiring within this of each other share a
// sum, which goes at the latest of their expiries.
const settleSlot = time.Minute

func (sp *space) settle(h held) {
	sp.settledBytes.stream += h.stream
	sp.settledBytes.records += h.records
	if n := len(sp.settled); n > 0 && h.expires.Before(sp.settled[n-1].at.Add(settleSlot)) {
		last := &sp.settled[n-1]
		last.stream += h.stream
		last.records += h.records
		if h.expires.After(last.at) {
			last.at = h.expires
		}
		return
	}
	sp.settled = append(sp.settled, expiring{at: h.expires, held: h})
}

// expire drops what has expired by now. Open Records expire too (one
// unwritten for the whole TTL is gone from the bucket).
func (sp *space) expire(now time.Time) {
	i := 0
	for ; i < len(sp.settled) && !sp.settled[i].at.After(now); i++ {
		sp.settledBytes.stream -= sp.settled[i].stream
		sp.settledBytes.records -= sp.settled[i].records
	}
	sp.settled = sp.settled[i:]
	for k, r := range sp.reserved {
		if now.Sub(r.at) >= reserveHold {
			sp.unreserve(k, r.held)
		}
	}
	if now.Sub(sp.openChecked) < openCheckEvery {
		return
	}
	sp.openChecked = now
	for k, h := range sp.open {
		if !h.expires.After(now) {
			sp.drop(k)
		}
	}
}

// openCheckEvery bounds how often a namespace's open Records are looked
// through for expiry (one unwritten for a whole TTL is rare: a queued
// invocation times out well within it).
const openCheckEvery = 10 * time.Second

// changing reports whether r may still be written: open, or with a
// callback event to deliver.
func changing(r Shape) bool {
	if !r.State.Terminal() || (r.State != messages.StateDeadLettered && r.StreamBytes > 0) {
		return true // a final one with StreamBytes is cleared when its messages are gone
	}
	cb := r.Callback
	return cb != nil && (cb.State == messages.CallbackPending || (cb.Start != nil && cb.Start.State == messages.CallbackPending))
}

// namespaceOf is the namespace of a Record key (stream.Key: <ns>.<id>).
func namespaceOf(key string) string {
	ns, _, _ := strings.Cut(key, ".")
	return ns
}
