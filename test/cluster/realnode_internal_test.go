package cluster

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// deadPID is the pid of a process that has exited.
func deadPID(t *testing.T) int {
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	return cmd.Process.Pid
}

// A real node whose owner was SIGKILLed leaves its cgroup tree (with
// containerd, shims and containers in it) and its network namespace (with
// the veth and route); the next start sweeps both, and leaves a live
// owner's alone.
func TestSweepRealNodesOfDeadOwners(t *testing.T) {
	if err := RealNodeSupport(); err != nil {
		t.Skip("no real node on this machine: " + err.Error())
	}
	dead, live := deadPID(t), os.Getpid()
	leftover := realPrefix + strconv.Itoa(dead) + "-0"
	mine := realPrefix + strconv.Itoa(live) + "-7"
	require.NoError(t, makeCgroups("/"+leftover))
	require.NoError(t, makeCgroups("/"+mine))
	t.Cleanup(func() { _ = killCgroup("/" + mine) })
	// A process left in the dead owner's tree, as a shim would be.
	sleeper := exec.Command("sleep", "600")
	require.NoError(t, sleeper.Start())
	exited := make(chan error, 1)
	go func() { exited <- sleeper.Wait() }()
	require.NoError(t, os.WriteFile(filepath.Join(cgroupRoot, "pids", leftover, "daemons", "cgroup.procs"),
		[]byte(strconv.Itoa(sleeper.Process.Pid)), 0o644))
	net, err := pickNodeNet(dead, 0)
	require.NoError(t, err)
	require.NoError(t, net.setUp())
	t.Cleanup(func() { _ = net.tearDown() })
	mineNet, err := pickNodeNet(live, 7)
	require.NoError(t, err)
	require.NoError(t, run("ip", "netns", "add", mineNet.netns))
	t.Cleanup(func() { _ = mineNet.tearDown() })

	sweepRealNodes(t.Logf)

	require.Error(t, <-exited, "the leftover process was not killed")
	for _, h := range hierarchies() {
		_, err := os.Stat(filepath.Join(cgroupRoot, h, leftover))
		require.True(t, os.IsNotExist(err), "cgroup %s/%s still there", h, leftover)
		_, err = os.Stat(filepath.Join(cgroupRoot, h, mine))
		require.NoError(t, err, "the live owner's cgroup %s/%s was swept", h, mine)
	}
	_, err = os.Stat(filepath.Join("/run/netns", net.netns))
	require.True(t, os.IsNotExist(err), "network namespace %s still there", net.netns)
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	require.NoError(t, err)
	require.NotContains(t, string(out), net.veth+"@", "the leftover veth")
	routes, err := exec.Command("ip", "-4", "route", "show").Output()
	require.NoError(t, err)
	require.NotContains(t, string(routes), net.podSubnet+".0/24", "the leftover route to its Pods")
	_, err = os.Stat(filepath.Join("/run/netns", mineNet.netns))
	require.NoError(t, err, "the live owner's namespace was swept")
}

// The generated kubelet and kube-proxy configurations are valid, with no
// unknown field (a typo would make the daemon ignore or refuse it).
func TestRealNodeConfigsAreStrict(t *testing.T) {
	net := nodeNet{netns: "rpn1-0", veth: "rpv1-0", hostIP: "10.233.9.1", nodeIP: "10.233.9.2", podSubnet: "10.234.9"}
	n := &RealNode{Name: "runplane-real-1-0", HostIP: net.hostIP, InternalIP: net.nodeIP, net: net, cgroup: "/runplane-real-1-0", sock: "/x/containerd.sock"}
	var cfg kubeletv1beta1.KubeletConfiguration
	require.NoError(t, yaml.UnmarshalStrict([]byte(kubeletConfig(n)), &cfg))
	require.Equal(t, "10.233.9.2", cfg.Address)
	require.Equal(t, []string{ClusterDNSIP}, cfg.ClusterDNS)
	require.Equal(t, "/runplane-real-1-0", cfg.CgroupRoot)
	require.False(t, *cfg.FailCgroupV1)
	require.Equal(t, "unix:///x/containerd.sock", cfg.ContainerRuntimeEndpoint)
	require.Equal(t, RealNodeTaint, cfg.RegisterWithTaints[0].Key)

	var cni struct {
		Plugins []struct {
			Type             string `json:"type"`
			IsDefaultGateway bool   `json:"isDefaultGateway"`
			Bridge           string `json:"bridge"`
		} `json:"plugins"`
	}
	require.NoError(t, json.Unmarshal([]byte(cniConfig(n)), &cni))
	require.Equal(t, "bridge", cni.Plugins[0].Type)
	require.True(t, cni.Plugins[0].IsDefaultGateway, "the node's namespace routes for its Pods")

	var proxy kubeproxyv1alpha1.KubeProxyConfiguration
	require.NoError(t, yaml.UnmarshalStrict([]byte(kubeProxyConfig(n, "/x/kubeconfig")), &proxy))
	require.Equal(t, "iptables", string(proxy.Mode))
	require.Equal(t, "10.234.9.0/24", proxy.ClusterCIDR)
	require.Equal(t, int32(0), *proxy.Conntrack.MaxPerCore, "kube-proxy must not size the host's conntrack table")
	require.False(t, *proxy.IPTables.LocalhostNodePorts, "localhost NodePorts need route_localnet")
	require.True(t, proxy.IPTables.MasqueradeAll, "no reliance on the host's br_netfilter")
}
