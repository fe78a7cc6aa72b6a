package ingress

import (
	v1 "github.com/runplane/runplane/api/serverless/v1"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/pool"
)

// newPoolStatus is ps as callers see it. Left out: the pool's namespace
// and name (the Pool's), and InvokeSeq, a position in the invocation
// stream all tenants share (the ingress reads it to count its backlog; a
// tenant would count everyone's invocations with it).
func newPoolStatus(ps messages.PoolStatus) *v1.PoolStatus {
	st := &v1.PoolStatus{Replicas: ps.Replicas, Backlog: ps.Backlog, InFlight: ps.InFlight, Capacity: ps.Capacity,
		Workers: make([]v1.Worker, 0, len(ps.Workers)), UpdatedAt: ps.UpdatedAt}
	for _, w := range ps.Workers {
		st.Workers = append(st.Workers, v1.Worker(w))
	}
	return st
}

// newPoolInfo is p as callers see it (durations in seconds).
// TestPoolInfoCoversPool fails when pool.Pool or pool.Policy gains a field
// this view does not show.
func newPoolInfo(p pool.Pool) v1.Pool {
	pol := p.Policy
	return v1.Pool{Name: p.Name, Namespace: p.Namespace, Deployment: p.Deployment, Conflict: p.Conflict, Replicas: p.Replicas,
		PolicyError: p.PolicyError, Policy: v1.PoolPolicy{
			MinAvailable: pol.MinAvailable, MaxReplicas: pol.MaxReplicas, IdleTimeoutSeconds: pol.IdleTimeout.Seconds(),
			MinRequestCount: pol.MinRequestCount, StartupTimeoutSeconds: pol.StartupTimeout.Seconds(), Concurrency: pol.Concurrency,
			MaxBacklog: pol.MaxBacklog, MaxInFlight: pol.MaxInFlight, TimeoutSeconds: pol.TimeoutSeconds,
			Retry:       v1.PoolRetry{MaxRetries: pol.Retry.MaxRetries, RetryOn: pol.Retry.On, RetryBackoffSeconds: pol.Retry.Backoff.Seconds()},
			CallbackURL: pol.CallbackURL,
		}}
}
