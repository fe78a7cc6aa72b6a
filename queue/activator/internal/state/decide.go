package state

import (
	"fmt"
	"sort"
	"time"

	"github.com/runplane/runplane/queue/pool"
)

// Decision is what the scaling policy asks for one pool.
type Decision struct {
	// To is the replica count wanted (== current: nothing to do).
	To int
	// Remove names the idle workers to take out when To < current.
	Remove []string
	Reason string
}

// WorkerView is one worker as the scaling policy sees it.
type WorkerView struct {
	Name      string
	Ready     bool // registered and ready: can serve
	Starting  bool // Pod exists, not ready yet, within startup-timeout
	InFlight  int
	IdleSince time.Time // zero while busy
}

// Decide applies a pool's policy. current is the workload's replicas,
// backlog the queued invocations, inflight the running ones; no more
// workers are asked for than pol.MaxInFlight (when set) can keep busy.
func Decide(pol pool.Policy, current, backlog, inflight int, workers []WorkerView, now time.Time) Decision {
	conc := max(pol.Concurrency, 1)
	work := backlog + inflight
	if pol.MaxInFlight > 0 {
		// No more than MaxInFlight can run at once: more workers would idle.
		work = min(work, pol.MaxInFlight)
	}
	need := (work + conc - 1) / conc
	want := current
	reason := ""
	if need > current {
		if current <= pol.MinAvailable && backlog < pol.MinRequestCount {
			reason = fmt.Sprintf("backlog %d below min-request-count %d", backlog, pol.MinRequestCount)
		} else {
			want, reason = need, fmt.Sprintf("backlog %d + in flight %d need %d workers", backlog, inflight, need)
		}
	}
	if pol.MaxReplicas > 0 && want > pol.MaxReplicas {
		want, reason = pol.MaxReplicas, reason+"; capped by max-replicas"
	}
	if want < pol.MinAvailable {
		want, reason = pol.MinAvailable, "min-available floor"
	}
	if want != current {
		return Decision{To: want, Reason: reason}
	}
	floor := max(need, pol.MinAvailable)
	if current <= floor {
		return Decision{To: current}
	}
	var idle []WorkerView
	for _, w := range workers {
		if w.Starting {
			// Removing replicas now could take the starting Pod (the
			// ReplicaSet deletes unready Pods first): wait.
			return Decision{To: current, Reason: "a worker is starting"}
		}
		if w.Ready && w.InFlight == 0 && !w.IdleSince.IsZero() && now.Sub(w.IdleSince) >= pol.IdleTimeout {
			idle = append(idle, w)
		}
	}
	sort.Slice(idle, func(i, j int) bool {
		if !idle[i].IdleSince.Equal(idle[j].IdleSince) {
			return idle[i].IdleSince.Before(idle[j].IdleSince)
		}
		return idle[i].Name < idle[j].Name
	})
	n := min(len(idle), current-floor)
	if n <= 0 {
		return Decision{To: current}
	}
	d := Decision{To: current - n, Reason: fmt.Sprintf("%d workers idle for %s", n, pol.IdleTimeout)}
	for _, w := range idle[:n] {
		d.Remove = append(d.Remove, w.Name)
	}
	return d
}
