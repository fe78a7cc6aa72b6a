//go:build tools

// Package kubelet only records the node binaries that node.sh builds from
// k8s.io/kubernetes: the kubelet and kube-proxy.
package kubelet

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
