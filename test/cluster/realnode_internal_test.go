package cluster

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
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
// containerd, shims and containers in it) and its bridge; the next start
// sweeps both, and leaves a live owner's alone.
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
	bridge := bridgePrefix + strconv.Itoa(dead) + "-0"
	require.NoError(t, run("ip", "link", "add", "name", bridge, "type", "bridge"))
	t.Cleanup(func() { _ = run("ip", "link", "delete", bridge) })

	sweepRealNodes(t.Logf)

	require.Error(t, <-exited, "the leftover process was not killed")
	for _, h := range hierarchies() {
		_, err := os.Stat(filepath.Join(cgroupRoot, h, leftover))
		require.True(t, os.IsNotExist(err), "cgroup %s/%s still there", h, leftover)
		_, err = os.Stat(filepath.Join(cgroupRoot, h, mine))
		require.NoError(t, err, "the live owner's cgroup %s/%s was swept", h, mine)
	}
	out, err := exec.Command("ip", "-o", "link", "show", "type", "bridge").Output()
	require.NoError(t, err)
	require.NotContains(t, string(out), bridge+":")
	require.True(t, strings.HasPrefix(mine, realPrefix))
}

// The generated kubelet configuration is a valid KubeletConfiguration with
// no unknown field (a typo would make the kubelet ignore or refuse it).
func TestRealNodeKubeletConfigIsStrict(t *testing.T) {
	n := &RealNode{Name: "runplane-real-1-0", HostIP: "10.234.9.1", cgroup: "/runplane-real-1-0", sock: "/x/containerd.sock"}
	var cfg kubeletv1beta1.KubeletConfiguration
	require.NoError(t, yaml.UnmarshalStrict([]byte(kubeletConfig(n, 10250)), &cfg))
	require.Equal(t, "/runplane-real-1-0", cfg.CgroupRoot)
	require.False(t, *cfg.FailCgroupV1)
	require.Equal(t, "unix:///x/containerd.sock", cfg.ContainerRuntimeEndpoint)
	require.Equal(t, RealNodeTaint, cfg.RegisterWithTaints[0].Key)

	var cni struct {
		Plugins []struct {
			Type      string `json:"type"`
			IsGateway bool   `json:"isGateway"`
			Bridge    string `json:"bridge"`
			IPAM      struct {
				Routes []struct{ Dst, GW string } `json:"routes"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	n.bridge = "rpr1-0"
	require.NoError(t, json.Unmarshal([]byte(cniConfig(n, "10.234.9")), &cni))
	require.Equal(t, "bridge", cni.Plugins[0].Type)
	require.False(t, cni.Plugins[0].IsGateway, "the host does not forward: no gateway on the bridge")
	require.Equal(t, "rpr1-0", cni.Plugins[0].Bridge)
	// The kubernetes Service's address goes to the host, which serves it
	// (realnode_apiserver.go); nothing else leaves the subnet.
	require.Len(t, cni.Plugins[0].IPAM.Routes, 1)
	require.Equal(t, kubernetesServiceIP+"/32", cni.Plugins[0].IPAM.Routes[0].Dst)
	require.Equal(t, "10.234.9.1", cni.Plugins[0].IPAM.Routes[0].GW)
}
