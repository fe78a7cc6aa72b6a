package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/runplane/runplane/test/cluster/fakedra"
)

// Dynamic Resource Allocation on the real nodes (Options.RealNodeDRA):
// each node's fake DRA driver (fakedra) publishes RealNodeGPUs GPUs as a
// ResourceSlice in the pool named after the node, under gpu.nvidia.com,
// beside (not instead of) the device plugin's nvidia.com/gpu. The
// kubelet's DRA support is GA and locked on since 1.35, so the kubelet
// needs no flag; containerd injects CDI devices (always on in containerd
// 2.x) from the node's own CDI directory (containerdConfig), where the
// driver writes one spec per prepared claim.

// CDIDir is the node's CDI spec directory, where its fake DRA driver
// writes a spec per prepared claim (fakedra.SpecFile).
func (n *RealNode) CDIDir() string { return realNodeCDIDir(n.Dir) }

// realNodeCDIDir is the node's CDI spec directory: its own, so that a node
// never sees the host's /etc/cdi or another node's claims.
func realNodeCDIDir(nodeDir string) string { return filepath.Join(nodeDir, "cdi") }

// startDRA starts the node's fake DRA driver once its kubelet serves and
// returns when the kubelet registered it and its ResourceSlice is
// published. The driver logs to fakedra.log in the node's dir.
func (c *Cluster) startDRA(ctx context.Context, node *RealNode, p *Process) error {
	logFile, err := os.Create(filepath.Join(node.Dir, "fakedra.log"))
	if err != nil {
		return fmt.Errorf("fake DRA driver of %s: %w", node.Name, err)
	}
	// V(6): the helper logs each prepare and unprepare call with its result.
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(logFile), textlogger.Verbosity(6)))
	driver := &fakedra.Driver{
		Client: c.client, NodeName: node.Name, Count: RealNodeGPUs,
		// The kubelet watches its own plugins_registry (this dir, bound at
		// /var/lib/kubelet in its mount namespace) and dials the DRA socket
		// by the path the driver registers, which is the same on the host.
		RegistryDir: filepath.Join(node.Dir, "kubelet", "plugins_registry"),
		PluginDir:   filepath.Join(node.Dir, "dra"),
		CDIDir:      realNodeCDIDir(node.Dir),
	}
	driverCtx, stop := context.WithCancel(klog.NewContext(context.Background(), logger))
	helper, err := driver.Start(driverCtx)
	if err != nil {
		stop()
		_ = logFile.Close()
		return err
	}
	node.stopDRA = func() {
		helper.Stop()
		stop()
		_ = logFile.Close()
	}
	began := time.Now()
	err = waitFor(ctx, p, "fake DRA driver of "+node.Name+" registered with "+fmt.Sprint(RealNodeGPUs)+" GPUs published", func() error {
		if st := helper.RegistrationStatus(); st == nil || !st.PluginRegistered {
			return fmt.Errorf("not registered with the kubelet (status %v); fakedra.log:\n%s", st, tailFile(logFile.Name(), 10))
		}
		slices, err := c.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"spec.nodeName": node.Name, "spec.driver": fakedra.DriverName,
		}.String()})
		if err != nil {
			return err
		}
		n := 0
		for _, s := range slices.Items {
			n += len(s.Spec.Devices)
		}
		if n != RealNodeGPUs {
			return fmt.Errorf("%d devices published in %d ResourceSlices; fakedra.log:\n%s", n, len(slices.Items), tailFile(logFile.Name(), 10))
		}
		return nil
	})
	if err == nil {
		c.logf("cluster: fake DRA driver of %s registered, %d GPUs published in %s", node.Name, RealNodeGPUs, time.Since(began).Round(100*time.Millisecond))
	}
	return err
}
