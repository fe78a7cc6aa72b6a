package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/runplane/runplane/test/runplanebin"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/hack/images"
	"github.com/runplane/runplane/test/cluster/fakegpu"
)

// Real nodes: a kubelet, containerd and kube-proxy per node, beside the
// kwok nodes.
//
// Each node's daemons run in a network namespace of their own
// (realnode_net.go) and a private mount namespace (unshare) where /run,
// /var/lib/kubelet, /var/lib/cni, /var/log/pods, /var/log/containers and
// the /proc/sys files the kubelet insists on writing are the node's own, so
// nothing on the host is changed but one veth, one route and the node's
// cgroups, all named after the node and removed at the end. Everything the
// node starts — kubelet, containerd, its shims (which leave the process
// group), kube-proxy, the containers — lives in one cgroup tree
// /runplane-real-<owner pid>-<i>, so teardown kills by that tree, and a
// later start sweeps the trees (and namespaces) of owners that died without
// tearing down (SIGKILL).

// Names and values of the real nodes.
const (
	// RealNodeTaint keeps Pods off the real nodes unless they tolerate it.
	RealNodeTaint = "runplane.io/real-node"
	// RealNodeLabel is set to "true" on real nodes.
	RealNodeLabel = "runplane.io/real-node"
	// RealNodeGPUs is how many fake GPUs each real node advertises.
	RealNodeGPUs = 4
	// EnvNodeBinDir names a directory holding kubelet, containerd,
	// containerd-shim-runc-v2 and ctr; when set, test/testbin/node.sh is not run.
	EnvNodeBinDir = "RUNPLANE_NODEBIN_DIR"

	realPrefix = "runplane-real-"
	cgroupRoot = "/sys/fs/cgroup"
)

// RealNodeToleration tolerates the real nodes' taint.
var RealNodeToleration = corev1.Toleration{Key: RealNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}

// RealNode is a running real node.
type RealNode struct {
	Name string
	// HostIP is the host's end of the node's veth: where Pods reach
	// services on the host (and the apiserver).
	HostIP string
	// InternalIP is the node's end: its InternalIP, where the apiserver
	// reaches the kubelet.
	InternalIP string
	// Dir holds the node's state and logs (containerd.log, kubelet.log).
	Dir string

	net               nodeNet
	cgroup, sock, ctr string
	stopPlugin        context.CancelFunc
	// stopDRA stops the fake DRA driver (Options.RealNodeDRA).
	stopDRA func()
}

// RealNodeSupport says why this machine cannot run real nodes, or nil.
func RealNodeSupport() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("real nodes need root (mount namespaces, cgroups, a veth); running as uid %d", os.Geteuid())
	}
	for _, bin := range []string{"runc", "unshare", "mount", "ip", "iptables"} {
		if _, err := exec.LookPath(bin); err != nil {
			if _, serr := os.Stat("/usr/sbin/" + bin); serr != nil {
				return fmt.Errorf("real nodes need %s (hack/install-deps.sh installs runc and the CNI plugins)", bin)
			}
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			return fmt.Errorf("real nodes need the CNI plugin %s in %s (Debian containernetworking-plugins; hack/install-deps.sh)", p, cniBinDir)
		}
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		return fmt.Errorf("real nodes need /bin/busybox for the user image (Debian busybox-static; hack/install-deps.sh)")
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "pids", "cgroup.procs")); err != nil {
		return fmt.Errorf("real nodes need the cgroup v1 pids hierarchy at %s/pids: %w", cgroupRoot, err)
	}
	return netpolSupport()
}

const cniBinDir = "/usr/lib/cni"

// NodeBinaries returns the directory holding the real node's binaries:
// EnvNodeBinDir, or test/testbin/node.sh's cache (building them the first
// time, about 15 minutes on 2 cores).
func NodeBinaries(ctx context.Context) (string, error) {
	if dir := os.Getenv(EnvNodeBinDir); dir != "" {
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "test", "testbin", "node.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building the real node's binaries: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// NodeBinariesBuilt returns the directory of the real node's binaries if
// they are built (EnvNodeBinDir or node.sh's cache), building nothing.
func NodeBinariesBuilt(ctx context.Context) (string, bool) {
	if dir := os.Getenv(EnvNodeBinDir); dir != "" {
		return dir, true
	}
	root, err := RepoRoot()
	if err != nil {
		return "", false
	}
	out, err := exec.CommandContext(ctx, "bash", filepath.Join(root, "test", "testbin", "node.sh"), "--check").Output()
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(out)), true
}

// RealNodes lists the cluster's running real nodes.
func (c *Cluster) RealNodes() []*RealNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*RealNode(nil), c.realNodes...)
}

// startRealNodes starts the planned real nodes, imports images into each,
// waits until each is Ready with its fake GPUs allocatable, then starts
// the cluster DNS on them.
func (c *Cluster) startRealNodes(ctx context.Context) error {
	bin, err := NodeBinaries(ctx)
	if err != nil {
		return err
	}
	images, err := c.buildImages(ctx, bin)
	if err != nil {
		return err
	}
	if c.realNodeDRA {
		if err := c.createDeviceClasses(ctx); err != nil {
			return err
		}
	}
	began := time.Now()
	if err := c.setUpNetworkPolicy(ctx, bin); err != nil {
		return err
	}
	c.logf("cluster: network-policy-api CRDs and the enforcer's RBAC in %s", time.Since(began).Round(100*time.Millisecond))
	for i, net := range c.realNets {
		node, err := c.startRealNode(ctx, bin, i, net, images)
		if node != nil {
			c.mu.Lock()
			c.realNodes = append(c.realNodes, node)
			c.mu.Unlock()
		}
		if err != nil {
			return err
		}
	}
	began = time.Now()
	if err := startDNS(ctx, c.client); err != nil {
		return err
	}
	c.logf("cluster: cluster DNS Ready in %s", time.Since(began).Round(100*time.Millisecond))
	return nil
}

func (c *Cluster) startRealNode(ctx context.Context, bin string, i int, net nodeNet, images string) (*RealNode, error) {
	began := time.Now()
	name := fmt.Sprintf("%s%d-%d", realPrefix, os.Getpid(), i)
	// A short dir: unix socket paths under it (containerd's, the device
	// plugin's) must stay under 108 bytes.
	dir := filepath.Join(c.dir, "real"+strconv.Itoa(i))
	node := &RealNode{
		Name: name, Dir: dir, HostIP: net.hostIP, InternalIP: net.nodeIP, net: net,
		cgroup: "/" + name, sock: filepath.Join(dir, "containerd.sock"), ctr: filepath.Join(bin, "ctr"),
	}
	for _, d := range []string{"kubelet", "cdi", "cni/net.d", "cni/cache", "cni/ipam", "containerd", "log/pods", "log/containers", "sysctl"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("real node %s: %w", name, err)
		}
	}
	// Mount points of the private namespace must exist on the host: empty
	// directories, never written (the node's own directories are bound there).
	for _, d := range []string{"/var/lib/kubelet", "/var/lib/cni", "/var/log/pods", "/var/log/containers"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("real node %s: %w", name, err)
		}
	}
	if err := makeCgroups(node.cgroup); err != nil {
		return node, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := nodeKubeconfig(c.kubeconfig, c.nodeAPIServerURL(net), kubeconfig); err != nil {
		return node, err
	}
	if err := c.netpolKubeconfig(c.nodeAPIServerURL(net), filepath.Join(dir, "netpol.kubeconfig")); err != nil {
		return node, err
	}
	files := map[string]string{
		"containerd.toml":                  containerdConfig(dir, node.sock, realNodeCDIDir(dir)),
		"kubelet.yaml":                     kubeletConfig(node),
		"kube-proxy.yaml":                  kubeProxyConfig(node, kubeconfig),
		"cni/net.d/10-runplane.conflist":   cniConfig(node),
		"sysctl/vm.overcommit_memory":      "1\n",
		"sysctl/vm.panic_on_oom":           "0\n",
		"sysctl/kernel.panic":              "10\n",
		"sysctl/kernel.panic_on_oops":      "1\n",
		"sysctl/kernel.keys.root_maxkeys":  "1000000\n",
		"sysctl/kernel.keys.root_maxbytes": "25000000\n",
		"node.sh":                          nodeScript(node, bin, kubeconfig),
	}
	for f, data := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(data), 0o644); err != nil {
			return node, fmt.Errorf("real node %s: %w", name, err)
		}
	}
	// nsenter, not "ip netns exec": that remounts /sys, hiding the cgroup
	// hierarchies the node's daemons live in.
	p, err := c.startCommand(name, "nsenter", "--net="+net.path(), "--", "unshare", "--mount", "--propagation", "private", "--", "/bin/sh", filepath.Join(dir, "node.sh"))
	if err != nil {
		return node, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := waitFor(waitCtx, p, "containerd of "+name, func() error {
		_, err := os.Stat(node.sock)
		return err
	}); err != nil {
		return node, err
	}
	if images != "" {
		imported := time.Now()
		if out, err := exec.CommandContext(ctx, node.ctr, "--address", node.sock, "-n", "k8s.io", "images", "import", images).CombinedOutput(); err != nil {
			return node, fmt.Errorf("importing images into %s: %w\n%s", name, err, out)
		}
		c.logf("cluster: imported images into %s in %s", name, time.Since(imported).Round(100*time.Millisecond))
	}
	if err := waitFor(waitCtx, p, "kubelet device-plugin socket of "+name, func() error {
		_, err := os.Stat(filepath.Join(dir, "kubelet", "device-plugins", "kubelet.sock"))
		return err
	}); err != nil {
		return node, err
	}
	pluginCtx, stopPlugin := context.WithCancel(context.Background())
	node.stopPlugin = stopPlugin
	plugin := &fakegpu.Plugin{Dir: filepath.Join(dir, "kubelet", "device-plugins"), Resource: string(api.DefaultGPUResource), Count: RealNodeGPUs}
	if _, err := plugin.Run(pluginCtx); err != nil {
		return node, err
	}
	err = waitFor(waitCtx, p, "real node "+name+" Ready with GPUs", func() error {
		n, err := c.client.CoreV1().Nodes().Get(waitCtx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		gpus := n.Status.Allocatable[api.DefaultGPUResource]
		if gpus.Value() != RealNodeGPUs {
			return fmt.Errorf("allocatable %s: %s", api.DefaultGPUResource, gpus.String())
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("not Ready")
	})
	if err != nil {
		return node, err
	}
	if c.realNodeDRA {
		if err := c.startDRA(waitCtx, node, p); err != nil {
			return node, err
		}
	}
	ready := time.Now()
	err = waitFor(waitCtx, p, "NetworkPolicy enforcer of "+name+" bound to nfqueue "+strconv.Itoa(netpolQueue), func() error {
		if err := netpolBound(p.Pid()); err != nil {
			return fmt.Errorf("%w; kube-network-policies.log:\n%s", err, tailFile(filepath.Join(dir, "kube-network-policies.log"), 10))
		}
		return nil
	})
	if err != nil {
		return node, err
	}
	c.logf("cluster: NetworkPolicy enforcer of %s enforcing %s after start, %s after Ready", name,
		time.Since(began).Round(100*time.Millisecond), time.Since(ready).Round(100*time.Millisecond))
	c.logf("cluster: real node %s Ready in %s (node %s, host %s, Pods %s.0/24, dir %s)", name, time.Since(began).Round(100*time.Millisecond),
		node.InternalIP, node.HostIP, net.podSubnet, dir)
	return node, nil
}

// nodeScript runs in the node's network and private mount namespaces: it
// joins the node's cgroup, makes the node's paths its own, starts
// containerd, kube-proxy and the NetworkPolicy enforcer (realnode_netpol.go)
// and becomes the kubelet.
func nodeScript(n *RealNode, bin, kubeconfig string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "set -eu\nexport PATH=%s:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n", bin)
	fmt.Fprintf(&b, "echo $$ > %s/pids%s/daemons/cgroup.procs\n", cgroupRoot, n.cgroup)
	b.WriteString("mount -t tmpfs -o mode=0755 tmpfs /run\nmkdir -p /run/containerd /run/netns\n")
	for _, m := range [][2]string{{"kubelet", "/var/lib/kubelet"}, {"cni/cache", "/var/lib/cni"}, {"log/pods", "/var/log/pods"}, {"log/containers", "/var/log/containers"}} {
		fmt.Fprintf(&b, "mount --bind %s %s\n", filepath.Join(n.Dir, m[0]), m[1])
	}
	// The kubelet sets these sysctls when they differ; here it writes the
	// node's files, never the host's.
	for _, s := range []string{"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops", "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes"} {
		fmt.Fprintf(&b, "mount --bind %s /proc/sys/%s\n", filepath.Join(n.Dir, "sysctl", s), strings.ReplaceAll(s, ".", "/"))
	}
	fmt.Fprintf(&b, "containerd --config %s >%s 2>&1 &\n", filepath.Join(n.Dir, "containerd.toml"), filepath.Join(n.Dir, "containerd.log"))
	fmt.Fprintf(&b, "kube-proxy --config=%s >%s 2>&1 &\n", filepath.Join(n.Dir, "kube-proxy.yaml"), filepath.Join(n.Dir, "kube-proxy.log"))
	fmt.Fprintf(&b, "while [ ! -S %s ] || [ ! -S %s ]; do sleep 0.1; done\n", n.sock, nriSocket)
	// After containerd's NRI socket exists: its NRI plugin connects once.
	fmt.Fprintf(&b, "kube-network-policies -kubeconfig=%s -hostname-override=%s -nfqueue-id=%d -admin-network-policy -baseline-admin-network-policy -v=2 >%s 2>&1 &\n",
		filepath.Join(n.Dir, "netpol.kubeconfig"), n.Name, netpolQueue, filepath.Join(n.Dir, "kube-network-policies.log"))
	fmt.Fprintf(&b, "exec kubelet --config=%s --kubeconfig=%s --hostname-override=%s --node-ip=%s --v=1 --node-labels=%s=true,type=real\n",
		filepath.Join(n.Dir, "kubelet.yaml"), kubeconfig, n.Name, n.InternalIP, RealNodeLabel)
	return b.String()
}

func containerdConfig(dir, sock, cdiDir string) string {
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q

[plugins.'io.containerd.internal.v1.opt']
  path = %[5]q
# NRI tells the NetworkPolicy enforcer a new Pod's IP when its sandbox
# starts, before the apiserver has it: without it a new Pod's first
# connections are judged as from an unknown address, out of its policies'
# reach (realnode_netpol.go). Only the enforcer connects; no plugin is
# launched from a path.
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = %[9]q
  plugin_path = %[10]q
  plugin_config_path = %[10]q

[plugins.'io.containerd.cri.v1.runtime']
  # No CAP_SYS_RESOURCE here: never lower a process's oom_score_adj.
  restrict_oom_score_adj = true
  tolerate_missing_hugetlb_controller = true
  # The node's own CDI specs only (the fake DRA driver's claims), never the
  # host's /etc/cdi.
  cdi_spec_dirs = [%[11]q]
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[6]q]
    conf_dir = %[7]q
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[8]q
`, filepath.Join(dir, "containerd", "root"), filepath.Join(dir, "containerd", "state"), sock, sock+".ttrpc",
		filepath.Join(dir, "containerd", "opt"), cniBinDir, filepath.Join(dir, "cni", "net.d"), SandboxImage, nriSocket, filepath.Join(dir, "nri"), cdiDir)
}

// SandboxImage is the pause image of the real nodes' Pod sandboxes (built by
// hack/images and imported; nothing is pulled).
const SandboxImage = "runplane.local/pause:1"

// nriSocket is containerd's NRI socket in the node's private /run, where
// the enforcer's NRI plugin looks for it (/var/run links to /run).
const nriSocket = "/run/nri/nri.sock"

func kubeletConfig(n *RealNode) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v2 is not available on our machines.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]s
containerRuntimeEndpoint: unix://%[2]s
address: %[3]s
port: 10250
readOnlyPort: 0
healthzPort: 0
# Reached only from the host (the node's veth), for tests: the apiserver has no
# kubelet client certificate, so the kubelet serves logs/exec to anyone who
# reaches it.
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
registerWithTaints:
- {key: %[4]s, value: "true", effect: NoSchedule}
podLogsDir: /var/log/pods
failSwapOn: false
maxPods: 30
resolvConf: ""
clusterDNS: [%[5]s]
clusterDomain: %[6]s
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusReportFrequency: 10s
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
fileCheckFrequency: 5s
serializeImagePulls: false
`, n.cgroup, n.sock, n.InternalIP, RealNodeTaint, ClusterDNSIP, ClusterDomain)
}

// cniConfig: the bridge is the Pods' gateway, inside the node's namespace.
func cniConfig(n *RealNode) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %[1]q,
  "plugins": [
    {"type": "bridge", "bridge": %[4]q, "isDefaultGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": %[2]q, "ranges": [[{"subnet": "%[3]s.0/24", "gateway": "%[3]s.1"}]]}},
    {"type": "loopback"}
  ]
}
`, n.Name, filepath.Join(n.Dir, "cni", "ipam"), n.net.podSubnet, podBridge)
}

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// hierarchies are the cgroup v1 hierarchies that hold the node's cgroup
// (the kubelet checks its cgroup root exists in each it uses).
func hierarchies() []string {
	entries, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return nil
	}
	var hs []string
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(cgroupRoot, e.Name(), "cgroup.procs")); err == nil && e.Name() != "unified" {
			hs = append(hs, e.Name())
		}
	}
	return hs
}

func makeCgroups(cg string) error {
	for _, h := range hierarchies() {
		dir := filepath.Join(cgroupRoot, h, cg)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		if h == "cpuset" {
			// A new cpuset has no CPUs or memory nodes until given its parent's.
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(cgroupRoot, h, f))
				if err != nil {
					return fmt.Errorf("reading %s: %w", f, err)
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("writing %s/%s: %w", dir, f, err)
				}
			}
		}
	}
	return os.MkdirAll(filepath.Join(cgroupRoot, "pids", cg, "daemons"), 0o755)
}

// killCgroup SIGKILLs every process in the pids cgroup tree cg until it is
// empty, then removes cg from every hierarchy, deepest first.
func killCgroup(cg string) error {
	root := filepath.Join(cgroupRoot, "pids", cg)
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		alive := 0
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					alive++
					_ = syscallKill(pid)
				}
			}
			return nil
		})
		return alive == 0, nil
	})
	if err != nil {
		return fmt.Errorf("emptying cgroup %s: %w", cg, err)
	}
	for _, h := range hierarchies() {
		removeTree(filepath.Join(cgroupRoot, h, cg))
	}
	return nil
}

// removeTree removes a cgroup directory and its children (cgroup dirs are
// removed with rmdir, deepest first; their files cannot be unlinked).
func removeTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = os.Remove(dir)
}

// sweepRealNodes removes what real nodes of dead owners left: their cgroup
// trees (and every process in them) and their network namespaces.
func sweepRealNodes(logf func(string, ...any)) {
	entries, _ := os.ReadDir(filepath.Join(cgroupRoot, "pids"))
	for _, e := range entries {
		if owner, ok := ownerOf(e.Name(), realPrefix); ok && !alive(owner) {
			logf("cluster: sweeping real node %s left by dead pid %d", e.Name(), owner)
			if err := killCgroup("/" + e.Name()); err != nil {
				logf("cluster: sweeping %s: %v", e.Name(), err)
			}
		}
	}
	sweepNetns(logf)
}

// ownerOf parses "<prefix><pid>-<i>".
func ownerOf(name, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	pid, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(pid)
	return n, err == nil
}

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

func alive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// stopRealNodes kills everything the real nodes started and removes their
// cgroups and network namespaces.
func (c *Cluster) stopRealNodes() {
	for _, n := range c.RealNodes() {
		if n.stopPlugin != nil {
			n.stopPlugin()
		}
		if n.stopDRA != nil {
			n.stopDRA()
		}
		if err := killCgroup(n.cgroup); err != nil {
			c.logf("cluster: stopping real node %s: %v", n.Name, err)
		}
	}
	// Every planned network, also those of nodes that never started.
	for _, net := range c.realNets {
		if err := net.tearDown(); err != nil {
			c.logf("cluster: removing network namespace %s: %v", net.netns, err)
		}
	}
}

// buildImages builds the standard images (hack/images) from this
// repository, and the cluster DNS's from the node binaries in nodeBin,
// into one OCI archive in the cluster dir.
func (c *Cluster) buildImages(ctx context.Context, nodeBin string) (string, error) {
	began := time.Now()
	tmp := filepath.Join(c.dir, "images")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", fmt.Errorf("building images: %w", err)
	}
	bin, err := runplanebin.Dir(ctx, filepath.Join(tmp, "bin"))
	if err != nil {
		return "", err
	}
	imgs, err := images.Standard(tmp, bin, "/bin/busybox")
	if err != nil {
		return "", err
	}
	dns, err := images.CoreDNS(tmp, filepath.Join(nodeBin, "coredns"))
	if err != nil {
		return "", err
	}
	imgs = append(imgs, dns)
	if c.extraImages != nil {
		extra, err := c.extraImages(tmp)
		if err != nil {
			return "", fmt.Errorf("building extra images: %w", err)
		}
		imgs = append(imgs, extra...)
	}
	out := filepath.Join(c.dir, "images.tar")
	if err := images.WriteArchive(out, tmp, imgs...); err != nil {
		return "", err
	}
	c.logf("cluster: built images in %s", time.Since(began).Round(100*time.Millisecond))
	return out, nil
}
