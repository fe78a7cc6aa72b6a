package callback

import (
	"context"
	"strings"
	"sync"
)

// fairQueue hands the Deliverer's workers the callbacks to POST, one
// namespace at a time in turn, and never more than perNamespace of one
// namespace at once: a tenant whose targets hang (each POST holds a worker
// up to the timeout) holds at most its share of the workers, and the other
// namespaces' callbacks go out meanwhile. Each namespace has at most
// maxPending callbacks here (queued, being POSTed or waiting for a retry);
// past that add refuses and the namespace is marked overflowed: the
// callback stays pending in its Record (the durable copy) and is read back
// by a rescan of the namespace once it has room again.
//
// Hand-written: no library schedules keyed work round-robin with a
// per-key concurrency cap (workqueue's rate limiters bound rates, not
// concurrency per tenant).
type fairQueue struct {
	perNamespace, maxPending int

	mu     sync.Mutex
	spaces map[string]*nsQueue
	order  []string // namespaces with state, in turn order
	cursor int
	// wake has a token when a worker may find work: taken by one waiting
	// worker, which passes it on when work is left.
	wake chan struct{}
}

type nsQueue struct {
	pending  map[string]struct{} // every key here: queued, running or waiting for its retry
	ready    []string            // keys due now, in arrival order
	running  int
	overflow bool // a key was refused: rescan the namespace's Records when there is room
}

func newFairQueue(perNamespace, maxPending int) *fairQueue {
	return &fairQueue{perNamespace: perNamespace, maxPending: maxPending, spaces: map[string]*nsQueue{}, wake: make(chan struct{}, 1)}
}

// namespaceOf is the namespace of a Records key ("<ns>.<id>").
func namespaceOf(key string) string {
	ns, _, _ := strings.Cut(key, ".")
	return ns
}

// add queues a new key. False when it is here already, or when its
// namespace has maxPending keys: then full is true and the namespace is
// overflowed.
func (q *fairQueue) add(key string) (added, full bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ns := namespaceOf(key)
	s := q.spaces[ns]
	if s == nil {
		s = &nsQueue{pending: map[string]struct{}{}}
		q.spaces[ns] = s
		q.order = append(q.order, ns)
	}
	if _, ok := s.pending[key]; ok {
		return false, false
	}
	if len(s.pending) >= q.maxPending {
		s.overflow = true
		return false, true
	}
	s.pending[key] = struct{}{}
	s.ready = append(s.ready, key)
	q.signal()
	return true, false
}

// requeue makes a key that is still pending (its retry is due) ready again.
func (q *fairQueue) requeue(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.spaces[namespaceOf(key)]
	if s == nil {
		return
	}
	if _, ok := s.pending[key]; !ok {
		return
	}
	s.ready = append(s.ready, key)
	q.signal()
}

// next blocks until a key may be POSTed, and counts it running in its
// namespace until done. False when ctx ends.
func (q *fairQueue) next(ctx context.Context) (string, bool) {
	for {
		if key, ok := q.take(); ok {
			return key, true
		}
		select {
		case <-ctx.Done():
			return "", false
		case <-q.wake:
		}
	}
}

func (q *fairQueue) take() (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range q.order {
		j := (q.cursor + i) % len(q.order)
		s := q.spaces[q.order[j]]
		if len(s.ready) == 0 || s.running >= q.perNamespace {
			continue
		}
		key := s.ready[0]
		s.ready = s.ready[1:]
		s.running++
		q.cursor = j + 1
		if q.runnable() {
			q.signal() // more work: wake another worker
		}
		return key, true
	}
	return "", false
}

// done ends a key's POST: keep when it stays pending (a retry is
// scheduled). True when the namespace was overflowed and has room again:
// the caller rescans its Records.
func (q *fairQueue) done(key string, keep bool) (rescan bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ns := namespaceOf(key)
	s := q.spaces[ns]
	if s == nil {
		return false
	}
	s.running--
	if !keep {
		delete(s.pending, key)
	}
	if s.overflow && len(s.pending) <= q.maxPending/2 {
		s.overflow, rescan = false, true
	}
	if len(s.pending) == 0 && s.running == 0 {
		q.drop(ns)
	}
	q.signal() // a running slot of ns is free
	return rescan
}

// drop forgets namespace ns (nothing of it is here any more). Under mu.
func (q *fairQueue) drop(ns string) {
	delete(q.spaces, ns)
	for i, n := range q.order {
		if n == ns {
			q.order = append(q.order[:i], q.order[i+1:]...)
			if q.cursor > i {
				q.cursor--
			}
			break
		}
	}
}

func (q *fairQueue) runnable() bool {
	for _, s := range q.spaces {
		if len(s.ready) > 0 && s.running < q.perNamespace {
			return true
		}
	}
	return false
}

func (q *fairQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}
