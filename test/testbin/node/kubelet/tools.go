//go:build tools

// Package kubelet only records the kubelet binary that node.sh builds.
package kubelet

import _ "k8s.io/kubernetes/cmd/kubelet"
