package activator

import (
	"strings"
	"sync"

	"github.com/runplane/runplane/internal/messages"
)

// eventSubject reads the namespace, pool and worker of a worker Events
// subject, <prefix>.metrics.<ns>.<pool>.<worker>. The NATS auth callout
// lets each worker publish only on its own, so the subject, not the body,
// says who an Event is from.
func (a *Activator) eventSubject(subject string) (ns, pool, worker string, ok bool) {
	tail, ok := strings.CutPrefix(subject, a.cfg.Store.Subjects.Prefix+".metrics.")
	if !ok {
		return "", "", "", false
	}
	parts := strings.Split(tail, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// checkEvent reports whether ev may be applied: it must be about the very
// worker, pool and namespace its subject names. A worker that names a
// sibling in the body (to deregister it, mark it unready or keep a dead one
// alive) is refused, counted and logged.
func (a *Activator) checkEvent(subject string, ev messages.Event) bool {
	if a.legacyEvent(subject) {
		return false
	}
	ns, pool, worker, ok := a.eventSubject(subject)
	if ok && ns == ev.Namespace && pool == ev.Pool && worker == ev.Worker {
		return true
	}
	a.metrics.foreign.WithLabelValues("event").Inc()
	a.cfg.Logger.Warn("ignoring a worker event whose body names another worker or pool than its subject", "subject", subject,
		"namespace", ev.Namespace, "pool", ev.Pool, "worker", ev.Worker, "type", ev.Type)
	return false
}

// maxLegacyWarned bounds the pools legacyEvents remembers having warned
// about (a pool name is a tenant's choice).
const maxLegacyWarned = 1024

// legacyEvents warns, once per pool, about Events published on the pool's
// root subject (metrics.<ns>.<pool>): sidecars older than the per-worker
// Events subjects did, with NATS users the callout granted before the
// upgrade (they expire within the callout's max TTL). Such an Event cannot
// say which worker sent it and is never applied: the pool's Pods must be
// restarted to get the current sidecar.
type legacyEvents struct {
	mu     sync.Mutex
	warned map[string]bool
}

// legacyEvent reports whether subject is a pool's root subject, <prefix>.metrics.<ns>.<pool>,
// and then counts the Event and warns once per pool.
func (a *Activator) legacyEvent(subject string) bool {
	tail, ok := strings.CutPrefix(subject, a.cfg.Store.Subjects.Prefix+".metrics.")
	if !ok || strings.Count(tail, ".") != 1 {
		return false
	}
	a.metrics.foreign.WithLabelValues("legacy_event_subject").Inc()
	l := &a.legacy
	l.mu.Lock()
	first := !l.warned[subject] && len(l.warned) < maxLegacyWarned
	if first {
		if l.warned == nil {
			l.warned = map[string]bool{}
		}
		l.warned[subject] = true
	}
	l.mu.Unlock()
	if first {
		a.cfg.Logger.Warn("ignoring worker events on the pool's subject: the pool's Pods run a sidecar older than this queue "+
			"(events now go to <subject>.<worker>); restart them (kubectl rollout restart) so they get work again", "subject", subject)
	}
	return true
}
