// Package kubetest holds the queue service's integration tests against a
// real local control plane (test/cluster): scale from zero, scale-up under
// backlog, the prewarm floor, idle scale-down that removes idle Pods only,
// redelivery when a worker's Pod disappears, and the manager's Lease
// hand-over (two contenders never run activators at once). Stub workers
// stand in for the sidecar, one per Running Pod of the pool.
package kubetest
