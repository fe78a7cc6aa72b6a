// Package extender is runplane's kube-scheduler extender: an HTTPS server
// answering filter, prioritize and bind for the runplane-scheduler profile
// (see the profile sub-package). It keeps a per-node ledger (sub-package
// ledger) from Pod and Node informers, lets a GPU Pod take over a same-spec
// stock placeholder at bind time, exposes Prometheus metrics, and binds only
// while it leads: its manager's Lease, or the co-located scheduler's.
package extender
