package pool

import "cmp"

// Limits are the cluster's fairness limits: the defaults of a pool's
// runplane.io/max-backlog and runplane.io/max-in-flight, and the bounds of
// each namespace (every pool of the namespace together). A negative value
// means unbounded; zero takes the default.
type Limits struct {
	// PoolMaxBacklog: queued invocations per pool (default 1000).
	PoolMaxBacklog int
	// PoolMaxInFlight: dispatched invocations per pool (default unbounded:
	// the pool's replicas × concurrency bound it).
	PoolMaxInFlight int
	// NamespaceMaxBacklog: queued invocations per namespace (default 5000).
	NamespaceMaxBacklog int
	// NamespaceMaxInFlight: dispatched invocations per namespace (default
	// 1000).
	NamespaceMaxInFlight int
	// NamespaceMaxStreams: open result streams (SSE) per namespace on one
	// ingress replica (default 100): each holds a consumer, a goroutine and
	// up to a pull window of chunks in the ingress.
	NamespaceMaxStreams int
}

// Default limits.
const (
	DefaultPoolMaxBacklog       = 1000
	DefaultNamespaceMaxBacklog  = 5000
	DefaultNamespaceMaxInFlight = 1000
	DefaultNamespaceMaxStreams  = 100
)

// WithDefaults fills the zero fields and turns negative ones into 0
// (unbounded).
func (l Limits) WithDefaults() Limits {
	l.PoolMaxBacklog = bound(cmp.Or(l.PoolMaxBacklog, DefaultPoolMaxBacklog))
	l.PoolMaxInFlight = bound(l.PoolMaxInFlight)
	l.NamespaceMaxBacklog = bound(cmp.Or(l.NamespaceMaxBacklog, DefaultNamespaceMaxBacklog))
	l.NamespaceMaxInFlight = bound(cmp.Or(l.NamespaceMaxInFlight, DefaultNamespaceMaxInFlight))
	l.NamespaceMaxStreams = bound(cmp.Or(l.NamespaceMaxStreams, DefaultNamespaceMaxStreams))
	return l
}

func bound(n int) int { return max(n, 0) }

// Backlog is the backlog bound of a pool with policy p (0: unbounded), on
// limits with defaults.
func (l Limits) Backlog(p Policy) int { return cmp.Or(p.MaxBacklog, l.PoolMaxBacklog) }

// InFlight is the in-flight bound of a pool with policy p (0: unbounded),
// on limits with defaults.
func (l Limits) InFlight(p Policy) int { return cmp.Or(p.MaxInFlight, l.PoolMaxInFlight) }
