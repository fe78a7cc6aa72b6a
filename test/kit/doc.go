// Package kit holds the small helpers test suites share (statistics for
// benchmark figures, fixtures, HTTP probes, log tails), written once here
// rather than copied into each suite. The control plane is test/cluster's,
// the in-process runplane stack test/stack's.
package kit
