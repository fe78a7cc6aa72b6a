// Package extender is runplane's kube-scheduler extender: an HTTPS server
// answering filter, prioritize and bind for the runplane-scheduler profile
// (see the profile sub-package). It keeps a per-node ledger (sub-package
// ledger) from Pod and Node informers, lets a GPU Pod take over a same-spec
// stock placeholder at bind time, exposes Prometheus metrics, and binds only
// while it holds its leader-election Lease.
package extender
