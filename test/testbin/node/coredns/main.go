// Command coredns is the real nodes' cluster DNS (test/cluster): CoreDNS
// with only the plugins a Kubernetes cluster DNS needs, so node.sh compiles
// a fraction of CoreDNS's default plugin set (no cloud DNS backends).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	// The order the plugins handle a query in (CoreDNS's plugin.cfg order).
	dnsserver.Directives = []string{"errors", "health", "ready", "kubernetes"}
}

func main() { coremain.Run() }
