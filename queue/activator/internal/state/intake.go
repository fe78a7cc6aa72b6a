package state

// How far the invoke consumer has taken the stream in, in order (issue 33,
// queue/README.md "Fairness"). The ingress counts a pool's backlog as the
// status's Backlog plus what it accepted above the status's InvokeSeq, so
// InvokeSeq must be a position at or below which every invocation message
// of the pool is queued here, in flight or known finished — for every pool,
// including one the activator has taken nothing of (a new pool, or an idle
// one after a restart, whose earlier invocations a previous leader
// finished). A pool's last sequence seen is not one: an invocation stored
// a while ago is read (its Record) off the consumer's goroutine, so a later
// one can be queued first.
//
// Three things make the position. The consumer delivers what it had not
// delivered before in stream order, so every message of its filter up to
// the highest one delivered was delivered (above what it had delivered
// when it was made: a previous leader's unacked messages come back only
// after the ack wait). A delivered message not handled yet (Delivered,
// Handled: a Record read, a nak) holds its pool's position below it — until
// the consumer's ack floor passes it: the server will not deliver it again
// (removed from the stream while it waited, or past its max deliveries),
// and a mark that stayed would hold its pool's count up for ever. And what
// the server says (AckFloor): the consumer's ack floor, or, when nothing is
// unacked, the last sequence the consumer went past, and when nothing is
// pending either, the stream's last sequence read an ask before — which
// also passes messages removed before they were delivered (a cancelled
// invocation's, swept), that no delivery ever would (activator
// proveIntake).

// Intake is the invoke consumer as it was made: the namespaces it filters
// on and, from its info, its ack floor, the last sequence it delivered and
// how many deliveries were unacked (a previous leader's).
type Intake struct {
	// All: it filters on every namespace (unsharded); else Namespaces.
	All        bool
	Namespaces []string
	AckFloor   uint64
	Delivered  uint64
	AckPending int
}

// intake is what the state knows of the current invoke consumer.
type intake struct {
	epoch uint64
	all   bool
	nss   map[string]bool
	// unsure: messages at or below it may wait with a previous leader
	// (delivered to it, not acked) until proven passes it.
	unsure uint64
	// proven: every message of the filter at or below it is handled;
	// floor: the server says none at or below it will be delivered again
	// (AckFloor).
	proven, floor uint64
	// delivered: the highest sequence this consumer delivered.
	delivered uint64
}

// InvokeConsumer notes that the invoke consumer was made (again) as in,
// and returns the epoch its deliveries are noted under (Consumed): a
// delivery of a consumer made earlier (still being handled after it was
// stopped) says nothing of this one's filter.
func (s *State) InvokeConsumer(in Intake) (epoch uint64) {
	next := intake{epoch: s.intake.epoch + 1, all: in.All, nss: map[string]bool{}, unsure: in.Delivered, proven: in.AckFloor}
	for _, ns := range in.Namespaces {
		next.nss[ns] = true
	}
	if in.AckPending == 0 {
		next.proven = max(next.proven, in.Delivered)
	}
	next.floor = next.proven
	s.intake = next
	return next.epoch
}

// Consumed notes that the invoke consumer of epoch delivered the message
// at seq (before it is handled: Accept marks it delivered).
func (s *State) Consumed(epoch, seq uint64) {
	if epoch == s.intake.epoch {
		s.intake.delivered = max(s.intake.delivered, seq)
	}
}

// AckFloor notes what the server says of the invoke consumer of epoch:
// every message of its filter at or below seq was acked (handled) or will
// not be delivered again (proveIntake).
func (s *State) AckFloor(epoch, seq uint64) {
	if epoch == s.intake.epoch {
		s.intake.floor = max(s.intake.floor, seq)
		s.intake.proven = max(s.intake.proven, seq)
	}
}

// position is how far the invocation messages of p are taken in (see
// above); it never goes back.
func (s *State) position(p *Pool) uint64 {
	in := s.intake
	if !in.all && !in.nss[p.Namespace] {
		return p.InvokeSeq
	}
	pos := in.proven
	if in.proven >= in.unsure {
		pos = max(pos, in.delivered)
	}
	if f := s.floors[Subject{Namespace: p.Namespace, Pool: p.Name}]; f != nil {
		// Few: the pool's messages whose Record read (or redelivery) is
		// pending.
		for seq := range f.delivered {
			if seq > in.floor {
				pos = min(pos, seq-1)
			}
		}
	}
	p.InvokeSeq = max(p.InvokeSeq, pos)
	return p.InvokeSeq
}
