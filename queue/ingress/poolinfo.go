package ingress

import (
	"time"

	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/queue/stream"
)

// PoolInfo is the answer to GET /v1/namespaces/{namespace}/pools/{pool}:
// pool.Pool as the API shows it (durations in seconds). A pool claimed by
// several Deployments of its namespace has Conflict set and serves
// nothing: invocations get 409 until all but one are removed.
// TestPoolInfoCoversPool fails when pool.Pool or pool.Policy gains a field
// this view does not show.
type PoolInfo struct {
	Name        string      `json:"name" doc:"the runplane.io/pool label value"`
	Namespace   string      `json:"namespace"`
	Deployment  string      `json:"deployment,omitempty" doc:"the Deployment labelled runplane.io/pool (empty while several claim the pool)"`
	Conflict    []string    `json:"conflict,omitempty" doc:"every Deployment of the namespace claiming the pool, when there is more than one"`
	Replicas    int         `json:"replicas" doc:"the Deployment's spec.replicas"`
	Policy      PoolPolicy  `json:"policy"`
	PolicyError string      `json:"policyError,omitempty" doc:"why the annotations are invalid; the default policy is then in force"`
	Status      *PoolStatus `json:"status,omitempty" doc:"the activator's view: workers, backlog, in flight"`
}

// PoolStatus is stream.PoolStatus as the API shows it. Left out:
// InvokeSeq, a position in the invocation stream all tenants share (the
// ingress reads it to count its backlog; a tenant would count everyone's
// invocations with it).
type PoolStatus struct {
	Namespace string                `json:"namespace"`
	Pool      string                `json:"pool"`
	Replicas  int                   `json:"replicas"`
	Backlog   int                   `json:"backlog"`
	InFlight  int                   `json:"inFlight"`
	Capacity  int                   `json:"capacity"`
	Workers   []stream.WorkerStatus `json:"workers"`
	UpdatedAt time.Time             `json:"updatedAt"`
}

func newPoolStatus(ps stream.PoolStatus) *PoolStatus {
	return &PoolStatus{Namespace: ps.Namespace, Pool: ps.Pool, Replicas: ps.Replicas, Backlog: ps.Backlog, InFlight: ps.InFlight,
		Capacity: ps.Capacity, Workers: ps.Workers, UpdatedAt: ps.UpdatedAt}
}

// PoolPolicy is pool.Policy with its durations in seconds.
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

// PoolRetry is poolpolicy.Retry with its backoff in seconds.
type PoolRetry struct {
	MaxRetries          int      `json:"maxRetries" doc:"more attempts a failed execution gets (0: none)"`
	RetryOn             []string `json:"retryOn,omitempty" doc:"what is retried: error, timeout, status codes (503) or classes (5xx)"`
	RetryBackoffSeconds float64  `json:"retryBackoffSeconds,omitempty" doc:"delay before the first retry, doubled per retry"`
}

func newPoolInfo(p pool.Pool) PoolInfo {
	pol := p.Policy
	return PoolInfo{Name: p.Name, Namespace: p.Namespace, Deployment: p.Deployment, Conflict: p.Conflict, Replicas: p.Replicas,
		PolicyError: p.PolicyError, Policy: PoolPolicy{
			MinAvailable: pol.MinAvailable, MaxReplicas: pol.MaxReplicas, IdleTimeoutSeconds: pol.IdleTimeout.Seconds(),
			MinRequestCount: pol.MinRequestCount, StartupTimeoutSeconds: pol.StartupTimeout.Seconds(), Concurrency: pol.Concurrency,
			MaxBacklog: pol.MaxBacklog, MaxInFlight: pol.MaxInFlight, TimeoutSeconds: pol.TimeoutSeconds,
			Retry:       PoolRetry{MaxRetries: pol.Retry.MaxRetries, RetryOn: pol.Retry.On, RetryBackoffSeconds: pol.Retry.Backoff.Seconds()},
			CallbackURL: pol.CallbackURL,
		}}
}
