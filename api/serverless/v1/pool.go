package v1

import "time"

// Pool is the answer to GET /v1/namespaces/{namespace}/pools/{pool}: the
// pool's policy (durations in seconds) and, once the activator published
// it, its status. A pool claimed by several Deployments of its namespace
// has Conflict set and serves nothing: invocations get 409 until all but
// one are removed.
type Pool struct {
	Name        string      `json:"name" doc:"the runplane.io/pool label value"`
	Namespace   string      `json:"namespace"`
	Deployment  string      `json:"deployment,omitempty" doc:"the Deployment labelled runplane.io/pool (empty while several claim the pool)"`
	Conflict    []string    `json:"conflict,omitempty" doc:"every Deployment of the namespace claiming the pool, when there is more than one"`
	Replicas    int         `json:"replicas" doc:"the Deployment's spec.replicas"`
	Policy      PoolPolicy  `json:"policy"`
	PolicyError string      `json:"policyError,omitempty" doc:"why the annotations are invalid; the default policy is then in force"`
	Status      *PoolStatus `json:"status,omitempty" doc:"the activator's view: workers, backlog, in flight"`
}

// PoolPolicy is a pool's policy annotations, durations in seconds.
type PoolPolicy struct {
	MinAvailable          int       `json:"minAvailable" doc:"runplane.io/min-available: workers kept warm"`
	MaxReplicas           int       `json:"maxReplicas" doc:"runplane.io/max-replicas (0: unbounded)"`
	IdleTimeoutSeconds    float64   `json:"idleTimeoutSeconds" doc:"runplane.io/idle-timeout, in seconds: idle time before scale-down"`
	MinRequestCount       int       `json:"minRequestCount" doc:"runplane.io/min-request-count: backlog before scale-up"`
	StartupTimeoutSeconds float64   `json:"startupTimeoutSeconds" doc:"runplane.io/startup-timeout, in seconds: a worker's start deadline"`
	Concurrency           int       `json:"concurrency" doc:"runplane.io/concurrency: invocations one worker runs at once"`
	MaxBacklog            int       `json:"maxBacklog,omitempty" doc:"runplane.io/max-backlog (0: the cluster default)"`
	MaxInFlight           int       `json:"maxInFlight,omitempty" doc:"runplane.io/max-in-flight (0: the cluster default)"`
	TimeoutSeconds        int       `json:"timeoutSeconds,omitempty" doc:"runplane.io/timeout-seconds: the pool's longest execution (0: the ingress's bounds apply)"`
	Retry                 PoolRetry `json:"retry" doc:"the retry policy of failed executions (runplane.io/max-retries, retry-on, retry-backoff)"`
	CallbackURL           string    `json:"callbackURL,omitempty" doc:"runplane.io/callback-url: the completion callback of invocations that name none"`
}

// PoolRetry is a pool's retry policy, its backoff in seconds.
type PoolRetry struct {
	MaxRetries          int      `json:"maxRetries" doc:"more attempts a failed execution gets (0: none)"`
	RetryOn             []string `json:"retryOn,omitempty" doc:"what is retried: error, timeout, status codes (503) or classes (5xx)"`
	RetryBackoffSeconds float64  `json:"retryBackoffSeconds,omitempty" doc:"delay before the first retry, doubled per retry"`
}

// PoolStatus is the activator's view of a pool.
type PoolStatus struct {
	Replicas  int       `json:"replicas" doc:"the workload's replicas as the activator last saw them"`
	Backlog   int       `json:"backlog" doc:"invocations queued, not yet dispatched"`
	InFlight  int       `json:"inFlight" doc:"invocations dispatched and not finished"`
	Capacity  int       `json:"capacity" doc:"invocations the ready workers run at once"`
	Workers   []Worker  `json:"workers"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Worker is one worker (Pod) of a pool.
type Worker struct {
	Name     string `json:"name"`
	Ready    bool   `json:"ready"`
	Draining bool   `json:"draining,omitempty"`
	Starting bool   `json:"starting,omitempty"`
	// Silent: not heard for the heartbeat timeout; it gets no new work.
	Silent      bool `json:"silent,omitempty"`
	Concurrency int  `json:"concurrency"`
	InFlight    int  `json:"inFlight"`
}
