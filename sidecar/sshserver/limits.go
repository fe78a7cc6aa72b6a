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
