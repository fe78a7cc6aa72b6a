// Package chaos is the serverless fault harness: it runs a real
// nats-server with file storage, one or two runplane-queue processes, N
// real runplane-sidecar processes each with framework-recorder (a framework
// that logs every execution), drives them with an open-loop load generator
// and injects faults (SIGKILL, SIGSTOP, restarts, a full JetStream store),
// then counts per case: accepted, succeeded, failed, lost (accepted, never
// terminal) and run twice (an invocation the framework completed more than
// once). The cases are the tests of this package and of test/chaos/kube
// (the ones that need Kubernetes: leader election, rollouts); `make chaos`
// runs them all and prints one table. See README.md.
package chaos
