package messages

import "time"

// PoolStatus is what the activator publishes per pool in the pool-status
// KV bucket (key: stream.PoolKey).
type PoolStatus struct {
	Namespace string `json:"namespace"`
	Pool      string `json:"pool"`
	Replicas  int    `json:"replicas"`
	Backlog   int    `json:"backlog"`
	// InvokeSeq is the last invoke.<ns>.<pool> stream sequence the activator
	// took in: the ingress counts what it accepted after it on top of
	// Backlog.
	InvokeSeq uint64         `json:"invokeSeq,omitempty"`
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
