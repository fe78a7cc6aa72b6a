package pool

import "cmp"

// Limits are the cluster's fairness limits: the defaults of a pool's
// runplane.io/max-backlog and runplane.io/max-in-flight, and the bounds of
// each namespace (every pool of the namespace together). A negative value
// means unbounded; zero takes the default. They are the limits section of
// runplane-queue's configuration file (queue/config) as they are.
type Limits struct {
	// PoolMaxBacklog: queued invocations per pool (default 1000).
	PoolMaxBacklog int `json:"poolMaxBacklog,omitempty"`
	// PoolMaxInFlight: dispatched invocations per pool (default unbounded:
	// the pool's replicas × concurrency bound it).
	PoolMaxInFlight int `json:"poolMaxInFlight,omitempty"`
	// NamespaceMaxBacklog: queued invocations per namespace (default 5000).
	NamespaceMaxBacklog int `json:"namespaceMaxBacklog,omitempty"`
	// NamespaceMaxInFlight: dispatched invocations per namespace (default
	// 1000).
	NamespaceMaxInFlight int `json:"namespaceMaxInFlight,omitempty"`
	// NamespaceMaxStreams: open result streams (SSE) per namespace on one
	// ingress replica (default 100): each holds a consumer, a goroutine and
	// up to a pull window of chunks in the ingress.
	NamespaceMaxStreams int `json:"namespaceMaxStreams,omitempty"`
	// NamespaceMaxStreamBytes: bytes of the shared invocation stream a
	// namespace's open invocations may hold, their messages and
	// Dispatches together (default 256 MiB); NamespaceMaxRecordBytes: bytes
	// of the shared Records bucket its Records may hold (default 512 MiB).
	// Beyond either, that namespace's new invocations get 429.
	NamespaceMaxStreamBytes int64 `json:"namespaceMaxStreamBytes,omitempty"`
	NamespaceMaxRecordBytes int64 `json:"namespaceMaxRecordBytes,omitempty"`
	// ReplicaMaxBodyBytes: request-body bytes one ingress replica holds
	// in memory at once, every namespace's together (default 192 MiB: a
	// body costs up to 4 times its size in the queue's RSS while it is
	// read, decoded and stored, so 768 MiB of the chart's 1 GiB memory
	// limit; test/bench/bodyrss.sh); NamespaceMaxBodyBytes: a namespace's
	// share of it (default 96 MiB, half: one body at the largest JSON body,
	// ~86 MiB, and no namespace takes it all). Counted from a request's
	// Content-Length before its body is read (a body without one: as it
	// arrives, 1 MiB at first); beyond
	// either, 429.
	ReplicaMaxBodyBytes   int64 `json:"replicaMaxBodyBytes,omitempty"`
	NamespaceMaxBodyBytes int64 `json:"namespaceMaxBodyBytes,omitempty"`
}

// Default limits.
const (
	DefaultPoolMaxBacklog       = 1000
	DefaultNamespaceMaxBacklog  = 5000
	DefaultNamespaceMaxInFlight = 1000
	DefaultNamespaceMaxStreams  = 100

	DefaultNamespaceMaxStreamBytes int64 = 256 << 20
	DefaultNamespaceMaxRecordBytes int64 = 512 << 20
	DefaultReplicaMaxBodyBytes     int64 = 192 << 20
	DefaultNamespaceMaxBodyBytes   int64 = 96 << 20
)

// Default fills the zero fields with the defaults as the configuration
// file shows them (-1: unbounded).
func (l *Limits) Default() {
	l.PoolMaxBacklog = cmp.Or(l.PoolMaxBacklog, DefaultPoolMaxBacklog)
	l.PoolMaxInFlight = cmp.Or(l.PoolMaxInFlight, -1)
	l.NamespaceMaxBacklog = cmp.Or(l.NamespaceMaxBacklog, DefaultNamespaceMaxBacklog)
	l.NamespaceMaxInFlight = cmp.Or(l.NamespaceMaxInFlight, DefaultNamespaceMaxInFlight)
	l.NamespaceMaxStreams = cmp.Or(l.NamespaceMaxStreams, DefaultNamespaceMaxStreams)
	l.NamespaceMaxStreamBytes = cmp.Or(l.NamespaceMaxStreamBytes, DefaultNamespaceMaxStreamBytes)
	l.NamespaceMaxRecordBytes = cmp.Or(l.NamespaceMaxRecordBytes, DefaultNamespaceMaxRecordBytes)
	l.ReplicaMaxBodyBytes = cmp.Or(l.ReplicaMaxBodyBytes, DefaultReplicaMaxBodyBytes)
	l.NamespaceMaxBodyBytes = cmp.Or(l.NamespaceMaxBodyBytes, DefaultNamespaceMaxBodyBytes)
}

// WithDefaults is l defaulted, negative bounds turned into 0 (unbounded):
// the form the ingress and the activator read.
func (l Limits) WithDefaults() Limits {
	l.Default()
	l.PoolMaxBacklog, l.PoolMaxInFlight = bound(l.PoolMaxBacklog), bound(l.PoolMaxInFlight)
	l.NamespaceMaxBacklog, l.NamespaceMaxInFlight = bound(l.NamespaceMaxBacklog), bound(l.NamespaceMaxInFlight)
	l.NamespaceMaxStreams = bound(l.NamespaceMaxStreams)
	l.NamespaceMaxStreamBytes, l.NamespaceMaxRecordBytes = bound(l.NamespaceMaxStreamBytes), bound(l.NamespaceMaxRecordBytes)
	l.ReplicaMaxBodyBytes, l.NamespaceMaxBodyBytes = bound(l.ReplicaMaxBodyBytes), bound(l.NamespaceMaxBodyBytes)
	return l
}

func bound[N int | int64](n N) N { return max(n, 0) }

// Backlog is the backlog bound of a pool with policy p (0: unbounded), on
// limits with defaults.
func (l Limits) Backlog(p Policy) int { return cmp.Or(p.MaxBacklog, l.PoolMaxBacklog) }

// InFlight is the in-flight bound of a pool with policy p (0: unbounded),
// on limits with defaults.
func (l Limits) InFlight(p Policy) int { return cmp.Or(p.MaxInFlight, l.PoolMaxInFlight) }
