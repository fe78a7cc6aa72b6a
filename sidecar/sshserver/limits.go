package sshserver

import "sync"

// slots is a counting limit without waiting: tryAcquire takes a slot when
// fewer than max are in use and fails at once otherwise. It bounds both the
// connections in the handshake (MaxStartups-like) and the channels of one
// connection.
type slots struct {
	mu  sync.Mutex
	max int
	n   int
}

func newSlots(max int) *slots { return &slots{max: max} }

// tryAcquire takes a slot and returns the number now in use, or reports
// false when all max are taken.
func (s *slots) tryAcquire() (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n >= s.max {
		return s.n, false
	}
	s.n++
	return s.n, true
}

// release returns a slot and the number still in use.
func (s *slots) release() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n > 0 {
		s.n--
	}
	return s.n
}

// perSource is a counting limit per key (a client address), without
// waiting, like slots. A key is forgotten when its last slot is returned,
// so the map holds no more keys than connections in the handshake.
type perSource struct {
	mu  sync.Mutex
	max int
	by  map[string]*sourceSlots
}

type sourceSlots struct {
	n int
	// full is set when a refusal starts an episode at the limit, so the
	// caller logs once per episode rather than once per refused connection.
	full bool
}

func newPerSource(max int) *perSource { return &perSource{max: max, by: map[string]*sourceSlots{}} }

// tryAcquire takes a slot for key, or reports false when key holds max;
// first is true on the first refusal since key was last below max.
func (p *perSource) tryAcquire(key string) (ok, first bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.by[key]
	if s == nil {
		s = &sourceSlots{}
		p.by[key] = s
	}
	if s.n >= p.max {
		first = !s.full
		s.full = true
		return false, first
	}
	s.n++
	return true, false
}

// release returns a slot of key.
func (p *perSource) release(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.by[key]
	if s == nil {
		return
	}
	s.n--
	s.full = false
	if s.n <= 0 {
		delete(p.by, key)
	}
}

// sources is the number of keys holding a slot.
func (p *perSource) sources() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.by)
}
