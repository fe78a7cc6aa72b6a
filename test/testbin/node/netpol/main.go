// Command kube-network-policies is the NetworkPolicy, AdminNetworkPolicy and
// BaselineAdminNetworkPolicy enforcer of the real nodes of test/cluster: the
// controller of sigs.k8s.io/kube-network-policies (pinned in go.mod), which
// judges the first packet of every connection that the node queues to it on
// an nfqueue and drops what the policies deny.
//
// This main replaces upstream's cmd for two things the test cluster needs
// and its flags cannot give:
//   - a kubeconfig (upstream reads only the in-cluster ServiceAccount
//     environment and files, which a node daemon here does not have);
//   - holding the DNS-agent queue (-nfqueue-id + 1). With AdminNetworkPolicy
//     on, the controller's DNS agent binds that queue and then installs an
//     nftables "queue" rule; on a kernel without CONFIG_NFT_QUEUE the rule
//     fails, the agent closes its socket and its receive loop spins on the
//     closed socket at 100% CPU. Bound here first, the agent's bind fails and
//     it returns at once. The agent only learns names for ANP domain peers,
//     which runplane does not use.
//
// The controller's own nftables rules fail the same way on such a kernel
// (it logs it and goes on); the node queues packets with iptables (xt
// NFQUEUE, which needs no CONFIG_NFT_QUEUE) instead — see
// test/cluster/realnode_net.go.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	nfqueue "github.com/florianl/go-nfqueue"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
	npaclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"
	npainformers "sigs.k8s.io/network-policy-api/pkg/client/informers/externalversions"
)

func main() {
	if err := run(); err != nil {
		klog.ErrorS(err, "kube-network-policies")
		klog.Flush()
		os.Exit(1)
	}
}

type options struct {
	kubeconfig, nodeName string
	queueID              int
	anp, banp            bool
}

func run() error {
	var o options
	klog.InitFlags(nil)
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the enforcer's identity (required)")
	flag.StringVar(&o.nodeName, "hostname-override", "", "name of the Node this enforcer runs on (required)")
	flag.IntVar(&o.queueID, "nfqueue-id", 100, "nfqueue the node queues new connections to; the DNS agent's is this + 1")
	flag.BoolVar(&o.anp, "admin-network-policy", false, "enforce AdminNetworkPolicy (policy.networking.k8s.io/v1alpha1)")
	flag.BoolVar(&o.banp, "baseline-admin-network-policy", false, "enforce BaselineAdminNetworkPolicy (policy.networking.k8s.io/v1alpha1)")
	flag.Parse()
	if o.kubeconfig == "" || o.nodeName == "" {
		return errors.New("-kubeconfig and -hostname-override are required")
	}
	if o.queueID < 1 || o.queueID > 65534 {
		return fmt.Errorf("-nfqueue-id %d: must be 1..65534", o.queueID)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("reading -kubeconfig: %w", err)
	}
	npa, err := npaclient.NewForConfig(cfg) // CRDs: JSON only
	if err != nil {
		return fmt.Errorf("network-policy-api client: %w", err)
	}
	pb := *cfg
	pb.AcceptContentTypes, pb.ContentType = "application/vnd.kubernetes.protobuf,application/json", "application/vnd.kubernetes.protobuf"
	client, err := kubernetes.NewForConfig(&pb)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}

	if o.anp || o.banp {
		dns, err := holdQueue(ctx, o.queueID+1)
		if err != nil {
			return err
		}
		defer func() {
			if err := dns.Close(); err != nil {
				klog.ErrorS(err, "closing the DNS queue")
			}
		}()
	}

	core := informers.NewSharedInformerFactory(client, 0)
	policy := npainformers.NewSharedInformerFactory(npa, 0)
	anpInf := policy.Policy().V1alpha1().AdminNetworkPolicies()
	banpInf := policy.Policy().V1alpha1().BaselineAdminNetworkPolicies()
	if !o.anp {
		anpInf = nil
	}
	if !o.banp {
		banpInf = nil
	}
	ctrl, err := networkpolicy.NewController(client,
		core.Networking().V1().NetworkPolicies(), core.Core().V1().Namespaces(), core.Core().V1().Pods(), core.Core().V1().Nodes(),
		npa, anpInf, banpInf,
		networkpolicy.Config{
			AdminNetworkPolicy: o.anp, BaselineAdminNetworkPolicy: o.banp,
			QueueID: o.queueID, NodeName: o.nodeName,
			// Fail closed: with the controller gone, queued packets are dropped.
			FailOpen: false,
			// Only changes the nftables rules, which cannot load here; the
			// conntrack race it works around is fixed in the kernels (6.12+)
			// this cluster runs on.
			NetfilterBug1766Fix: false,
		})
	if err != nil {
		return fmt.Errorf("creating the controller: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()
	core.Start(ctx.Done())
	policy.Start(ctx.Done())
	klog.InfoS("enforcing", "node", o.nodeName, "queue", o.queueID, "adminNetworkPolicy", o.anp, "baselineAdminNetworkPolicy", o.banp)
	select {
	case err := <-done:
		// Run returns early only when it cannot enforce (caches, the queue).
		if ctx.Err() == nil {
			return fmt.Errorf("controller stopped: %w", err)
		}
	case <-ctx.Done():
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	}
	return nil
}

// holdQueue binds nfqueue id and accepts whatever reaches it (nothing is
// queued there: the rule that would is the one the kernel refuses).
func holdQueue(ctx context.Context, id int) (*nfqueue.Nfqueue, error) {
	q, err := nfqueue.Open(&nfqueue.Config{
		NfQueue: uint16(id), MaxPacketLen: 0, MaxQueueLen: 16, Copymode: nfqueue.NfQnlCopyMeta,
		Flags: nfqueue.NfQaCfgFlagFailOpen, WriteTimeout: 100 * time.Millisecond,
	})
	if err != nil {
		return nil, fmt.Errorf("opening nfqueue %d: %w", id, err)
	}
	accept := func(a nfqueue.Attribute) int {
		if err := q.SetVerdict(*a.PacketID, nfqueue.NfAccept); err != nil {
			klog.ErrorS(err, "accepting a packet on the DNS queue", "queue", id)
		}
		return 0
	}
	stop := func(err error) int {
		if ctx.Err() != nil {
			return 1
		}
		klog.ErrorS(err, "DNS queue", "queue", id)
		return 1 // never spin on a broken socket
	}
	if err := q.RegisterWithErrorFunc(ctx, accept, stop); err != nil {
		_ = q.Close()
		return nil, fmt.Errorf("binding nfqueue %d: %w", id, err)
	}
	return q, nil
}
