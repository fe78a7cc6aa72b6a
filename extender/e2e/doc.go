// Package e2e runs the extender against a real control plane (test/cluster:
// kube-apiserver, controllers, kwok nodes) and a real kube-scheduler started
// with the runplane-scheduler profile. The extender runs as its binary
// (cmd/runplane-extender) so a test can kill it mid-burst; one test runs it
// in-process through extender.Start. Benchmarks here measure takeover
// latency against default-scheduler preemption and bind throughput.
package e2e
