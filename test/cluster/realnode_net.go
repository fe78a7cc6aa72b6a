package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"k8s.io/client-go/tools/clientcmd"
)

// A real node's network: its own network namespace.
//
// Each node runs in a network namespace rpn<owner pid>-<i> joined to the
// host by one veth pair (host rpv<owner pid>-<i>, node eth0) on
// 10.233.<x>.0/30: the host holds .1 (RealNode.HostIP, where Pods reach
// host services and the apiserver), the node .2 (its InternalIP). Inside,
// the node forwards (ip_forward is per namespace: the host's stays 0), the
// CNI bridge is the Pods' gateway on 10.234.<x>.0/24, and kube-proxy
// (iptables mode, the namespace's own tables) gives Pods Service VIPs, and
// kube-network-policies enforces NetworkPolicy and (Baseline)AdminNetworkPolicy
// (realnode_netpol.go: why its packets are queued with iptables); the
// host routes 10.234.<x>.0/24 to the node, so the apiserver reaches Pods
// by IP (webhooks: --enable-aggregator-routing) and tests reach them too.
// Cluster DNS is CoreDNS in a Pod behind the Service kube-dns (dns.go).
//
// So the host gains one veth and one route per node, both gone with the
// namespace; chosen over Pods on a host bridge, which cannot have Service
// VIPs without host forwarding (Pod → VIP → Pod on the same bridge is
// routed) or host-wide kube-proxy rules that two clusters on one machine
// would fight over.

const (
	// ClusterDNSIP is the kube-dns Service's ClusterIP, the Pods' nameserver
	// on real nodes; ClusterDomain their search domain.
	ClusterDNSIP  = "10.96.0.10"
	ClusterDomain = "cluster.local"

	netnsPrefix = "rpn"
	vethPrefix  = "rpv"
	// apiserverName is the name the nodes verify the apiserver's serving
	// certificate against (it has no SAN for the host's link addresses).
	apiserverName = "localhost"
)

// nodeNet is one real node's addresses.
type nodeNet struct {
	netns, veth string
	// hostIP and nodeIP are the veth's two ends; podSubnet is "10.234.<x>".
	hostIP, nodeIP, podSubnet string
}

// pickNodeNet finds an index x with neither 10.233.<x>.0/30 nor
// 10.234.<x>.0/24 in use on the host (addresses or routes), starting at
// an offset of the owner's pid so concurrent clusters rarely probe the
// same x first.
func pickNodeNet(owner, i int) (nodeNet, error) {
	addrs, err := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		return nodeNet{}, fmt.Errorf("listing host addresses: %w", err)
	}
	routes, err := exec.Command("ip", "-4", "route", "show").Output()
	if err != nil {
		return nodeNet{}, fmt.Errorf("listing host routes: %w", err)
	}
	used := string(addrs) + "\n" + string(routes)
	for k := range 254 {
		x := (owner+k)%254 + 1
		if strings.Contains(used, "10.233."+strconv.Itoa(x)+".") || strings.Contains(used, "10.234."+strconv.Itoa(x)+".") {
			continue
		}
		link := "10.233." + strconv.Itoa(x)
		return nodeNet{
			netns: fmt.Sprintf("%s%d-%d", netnsPrefix, owner, i), veth: fmt.Sprintf("%s%d-%d", vethPrefix, owner, i),
			hostIP: link + ".1", nodeIP: link + ".2", podSubnet: "10.234." + strconv.Itoa(x),
		}, nil
	}
	return nodeNet{}, fmt.Errorf("no free 10.233.x.0/30 and 10.234.x.0/24 for a real node")
}

// planRealNodes checks the machine and sweeps what dead owners left, then
// picks and sets up the networks of n real nodes (before the apiserver
// starts: it advertises the first one's host address). Picking and setting
// up hold a host-wide lock, so clusters starting at once on one machine
// never pick the same addresses: the next picker sees them in use.
func planRealNodes(n int, logf func(string, ...any)) (nets []nodeNet, err error) {
	if err := RealNodeSupport(); err != nil {
		return nil, err
	}
	sweepRealNodes(logf)
	unlock, err := lockHost()
	if err != nil {
		return nil, err
	}
	defer unlock()
	defer func() {
		if err != nil {
			for _, net := range nets {
				_ = net.tearDown()
			}
			nets = nil
		}
	}()
	for i := range n {
		net, err := pickNodeNet(os.Getpid(), i)
		if err != nil {
			return nets, err
		}
		if err := net.setUp(); err != nil {
			_ = net.tearDown()
			return nets, err
		}
		nets = append(nets, net)
	}
	return nets, nil
}

// lockHost takes the host-wide lock of real-node network set-up.
func lockHost() (unlock func(), err error) {
	f, err := os.OpenFile("/run/lock/runplane-realnode-net", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("real node network lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("real node network lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// nodeAPIServerURL is the apiserver as node net reaches it.
func (c *Cluster) nodeAPIServerURL(net nodeNet) string {
	return "https://" + net.hostIP + ":" + strconv.Itoa(c.apiPort)
}

// setUp creates the namespace, the veth pair and the routes.
func (n nodeNet) setUp() error {
	steps := [][]string{
		{"netns", "add", n.netns},
		{"link", "add", "name", n.veth, "type", "veth", "peer", "name", "eth0", "netns", n.netns},
		{"addr", "add", n.hostIP + "/30", "dev", n.veth},
		{"link", "set", n.veth, "up"},
		{"-n", n.netns, "link", "set", "lo", "up"},
		{"-n", n.netns, "addr", "add", n.nodeIP + "/30", "dev", "eth0"},
		{"-n", n.netns, "link", "set", "eth0", "up"},
		{"-n", n.netns, "route", "add", "default", "via", n.hostIP},
		{"route", "add", n.podSubnet + ".0/24", "via", n.nodeIP, "dev", n.veth},
	}
	for _, s := range steps {
		if err := run("ip", s...); err != nil {
			return err
		}
	}
	// The node routes between its Pods, its Service VIPs and the host; the
	// namespace's own ip_forward, not the host's.
	if err := run("nsenter", "--net="+n.path(), "--", "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"); err != nil {
		return err
	}
	// The kubelet serves anyone who reaches it (kubeletConfig): the host
	// (the apiserver) may, Pods of any node may not.
	if err := run("nsenter", "--net="+n.path(), "--", "iptables", "-I", "INPUT", "-p", "tcp", "--dport", "10250", "!", "-s", n.hostIP, "-j", "DROP"); err != nil {
		return err
	}
	// New connections go to the NetworkPolicy enforcer before anything runs
	// in the namespace (realnode_netpol.go).
	return run("nsenter", "--net="+n.path(), "--", "sh", "-c", netpolScript())
}

// path is the namespace's bind mount, for nsenter.
func (n nodeNet) path() string { return filepath.Join("/run/netns", n.netns) }

// tearDown deletes the namespace (its veth and the host route go with it).
func (n nodeNet) tearDown() error { return deleteNetns(n.netns) }

func deleteNetns(name string) error {
	if _, err := os.Stat(filepath.Join("/run/netns", name)); os.IsNotExist(err) {
		return nil
	}
	return run("ip", "netns", "delete", name)
}

// sweepNetns deletes the namespaces of real nodes whose owner died, and
// the host ends of their veths should a namespace have outlived its
// deletion (a process still in it).
func sweepNetns(logf func(string, ...any)) {
	out, _ := exec.Command("ip", "-o", "link", "show").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if owner, ok := ownerOf(name, vethPrefix); ok && !alive(owner) {
			logf("cluster: sweeping veth %s left by dead pid %d", name, owner)
			_ = run("ip", "link", "delete", name)
		}
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if owner, ok := ownerOf(e.Name(), netnsPrefix); ok && !alive(owner) {
			logf("cluster: sweeping network namespace %s left by dead pid %d", e.Name(), owner)
			if err := deleteNetns(e.Name()); err != nil {
				logf("cluster: sweeping %s: %v", e.Name(), err)
			}
		}
	}
}

// nodeKubeconfig is the admin kubeconfig pointed at the apiserver's
// address as the node sees it (apiserverURL), verified as apiserverName.
func nodeKubeconfig(admin, apiserverURL, path string) error {
	cfg, err := clientcmd.LoadFromFile(admin)
	if err != nil {
		return fmt.Errorf("reading %s: %w", admin, err)
	}
	for _, cl := range cfg.Clusters {
		cl.Server = apiserverURL
		cl.TLSServerName = apiserverName
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// kubeProxyConfig runs kube-proxy in iptables mode in the node's namespace,
// touching no host-wide setting (conntrack sizes and timeouts as they are,
// no localhost NodePorts, which would need route_localnet).
func kubeProxyConfig(n *RealNode, kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %[1]s
hostnameOverride: %[2]s
mode: iptables
clusterCIDR: %[3]s.0/24
iptables:
  # Every Service connection is masqueraded, so a reply on the same bridge
  # comes back through the node (un-NATed there) whether or not the host
  # has br_netfilter loaded.
  masqueradeAll: true
  localhostNodePorts: false
  syncPeriod: 5s
  minSyncPeriod: 0s
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
`, kubeconfig, n.Name, n.net.podSubnet)
}

// AddLocalAddress adds addr (a CIDR, e.g. 169.254.169.254/32) to the node
// namespace's loopback: Pods reach it through their gateway, as they would
// a cloud's metadata service or any local listener of the node. The
// returned func removes it.
func (n *RealNode) AddLocalAddress(addr string) (remove func() error, err error) {
	if err := run("ip", "-n", n.net.netns, "addr", "add", addr, "dev", "lo"); err != nil {
		return nil, err
	}
	return func() error { return run("ip", "-n", n.net.netns, "addr", "del", addr, "dev", "lo") }, nil
}

// Listen listens on address (net.Listen's) in the node's network
// namespace, from this process: a listener of the node itself. A socket
// keeps the namespace it was made in, so only its creation runs on a
// thread switched into the node's namespace.
func (n *RealNode) Listen(network, address string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked on failure: the thread then ends with the
		// goroutine instead of serving others in the wrong namespace.
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			done <- result{err: err}
			return
		}
		defer own.Close()
		target, err := os.Open(n.net.path())
		if err != nil {
			done <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("entering %s: %w", n.net.netns, err)}
			return
		}
		ln, err := net.Listen(network, address)
		if rerr := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); rerr != nil {
			done <- result{ln: ln, err: errors.Join(err, fmt.Errorf("leaving %s: %w", n.net.netns, rerr))}
			return
		}
		runtime.UnlockOSThread()
		done <- result{ln: ln, err: err}
	}()
	r := <-done
	if r.err != nil {
		if r.ln != nil {
			_ = r.ln.Close()
		}
		return nil, fmt.Errorf("listening on %s %s in node %s: %w", network, address, n.Name, r.err)
	}
	return r.ln, nil
}
