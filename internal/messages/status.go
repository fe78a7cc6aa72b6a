package messages

import "time"

// PoolStatus is what the activator publishes per pool in the pool-status
// KV bucket (key: stream.PoolKey).
type PoolStatus struct {
	Namespace string `json:"namespace"`
	Pool      string `json:"pool"`
	Replicas  int    `json:"replicas"`
	Backlog   int    `json:"backlog"`
	// InvokeSeq is how far the activator took in the invocation stream:
	// every invoke.<ns>.<pool> message at or below it is queued (in
	// Backlog), in flight or known finished; the ingress counts what it
	// accepted after it on top of Backlog. Set in every status, 0
	// included, also of a pool the activator took nothing of (nil: an
	// older activator's status, which the ingress reads as covering all).
	// A position in the stream every tenant shares: never in an answer.
	InvokeSeq *uint64        `json:"invokeSeq,omitempty"`
	InFlight  int            `json:"inFlight"`
	Capacity  int            `json:"capacity"`
	Workers   []WorkerStatus `json:"workers"`
	UpdatedAt time.Time      `json:"updatedAt"`
}

// WorkerStatus is one worker in a PoolStatus.
type WorkerStatus struct {
	Name     string `json:"name"`
	Ready    bool   `json:"ready"`
	Draining bool   `json:"draining,omitempty"`
	Starting bool   `json:"starting,omitempty"`
	// Silent: not heard for the heartbeat timeout; it gets no new work and
	// what it holds waits for it (until the hold or the work's deadline).
	Silent      bool `json:"silent,omitempty"`
	Concurrency int  `json:"concurrency"`
	InFlight    int  `json:"inFlight"`
}
