// Package kube holds the chaos cases that need Kubernetes: two queue
// replicas contending for the activator Lease (a leader SIGKILLed under
// load) and a rollout restart of a pool Deployment, on the local control
// plane of test/cluster with workers run by test/localworkers (real
// runplane-sidecar + framework-recorder processes per kwok Pod). They run
// only under make chaos (RUNPLANE_CHAOS=full).
package kube
