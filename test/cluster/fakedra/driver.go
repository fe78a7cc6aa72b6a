package fakedra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

// Driver publishes Count fake GPUs of one node and prepares claims for
// them.
type Driver struct {
	// Client publishes the ResourceSlice and reads claims.
	Client kubernetes.Interface
	// NodeName is the node; its pool has its name.
	NodeName string
	Count    int
	// RegistryDir is the kubelet's plugin registration directory
	// (<kubelet root>/plugins_registry) as seen by this process.
	RegistryDir string
	// PluginDir holds the driver's DRA socket; the kubelet dials it by this
	// path, so it must be the same in the kubelet's mount namespace.
	PluginDir string
	// CDIDir is where claim specs go: a directory the container runtime
	// reads CDI specs from (containerd's cdi_spec_dirs).
	CDIDir string
	// HostDevice is the device node bound in for each GPU (default /dev/null).
	HostDevice string
	// NVLinkDomain is every GPU's NVLinkDomainAttribute (default NodeName).
	NVLinkDomain string

	// mu serializes preparation so two claims never take one device
	// (the helper serializes gRPC calls too; this keeps the check and the
	// write together for direct callers).
	mu sync.Mutex
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// Start registers the driver with the kubelet and publishes the node's
// GPUs. The driver serves until ctx ends or Stop of the returned helper;
// ctx's logger (klog.FromContext) gets the helper's log.
func (d *Driver) Start(ctx context.Context) (*kubeletplugin.Helper, error) {
	if d.Client == nil || d.NodeName == "" || d.Count <= 0 || d.RegistryDir == "" || d.PluginDir == "" || d.CDIDir == "" {
		return nil, fmt.Errorf("fake DRA driver: want Client, NodeName, RegistryDir, PluginDir, CDIDir and a positive Count, got node %q count %d registry %q plugin %q CDI %q",
			d.NodeName, d.Count, d.RegistryDir, d.PluginDir, d.CDIDir)
	}
	for _, dir := range []string{d.RegistryDir, d.PluginDir, d.CDIDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("fake DRA driver: %w", err)
		}
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(DriverName),
		kubeletplugin.KubeClient(d.Client),
		kubeletplugin.NodeName(d.NodeName),
		kubeletplugin.RegistrarDirectoryPath(d.RegistryDir),
		kubeletplugin.PluginDataDirectoryPath(d.PluginDir),
		// Health reports would only repeat "healthy" for devices that
		// cannot fail.
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		return nil, fmt.Errorf("fake DRA driver on %s: %w", d.NodeName, err)
	}
	domain := d.NVLinkDomain
	if domain == "" {
		domain = d.NodeName
	}
	err = helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.NodeName: {Slices: []resourceslice.Slice{{Devices: Devices(d.NodeName, d.Count, domain)}}},
	}})
	if err != nil {
		helper.Stop()
		return nil, fmt.Errorf("fake DRA driver on %s: %w", d.NodeName, err)
	}
	return helper, nil
}

// PrepareResourceClaims writes each claim's CDI spec and returns its CDI
// devices. A device already prepared for another claim fails that claim:
// the driver is the last line of defense against two workloads on one GPU.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	held, err := preparedDevices(d.CDIDir)
	if err != nil {
		return nil, err
	}
	results := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		devices, err := d.prepare(claim, held)
		if err != nil {
			klog.FromContext(ctx).Error(err, "preparing claim", "claim", klog.KObj(claim))
		}
		results[claim.UID] = kubeletplugin.PrepareResult{Devices: devices, Err: err}
	}
	return results, nil
}

func (d *Driver) prepare(claim *resourceapi.ResourceClaim, held map[string]types.UID) ([]kubeletplugin.Device, error) {
	gpus, err := allocatedGPUs(claim, d.NodeName, d.Count)
	if err != nil {
		return nil, err
	}
	for _, g := range gpus {
		if other, ok := held[g.name]; ok && other != claim.UID {
			return nil, fmt.Errorf("claim %s/%s: device %s is prepared for claim %s", claim.Namespace, claim.Name, g.name, other)
		}
	}
	host := d.HostDevice
	if host == "" {
		host = "/dev/null"
	}
	spec, err := claimSpec(claim.UID, d.NodeName, host, gpus)
	if err != nil {
		return nil, err
	}
	if err := writeSpec(d.CDIDir, claim.UID, spec); err != nil {
		return nil, err
	}
	devices := make([]kubeletplugin.Device, 0, len(gpus))
	for _, g := range gpus {
		held[g.name] = claim.UID
		devices = append(devices, kubeletplugin.Device{
			Requests: []string{g.request}, PoolName: d.NodeName, DeviceName: g.name,
			CDIDeviceIDs: []string{CDIDeviceID(claim.UID, g.name)},
		})
	}
	return devices, nil
}

// UnprepareResourceClaims removes the claims' CDI specs, which frees
// their devices; a claim never prepared is already unprepared.
func (d *Driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	results := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		results[c.UID] = removeSpec(d.CDIDir, c.UID)
	}
	return results, nil
}

// HandleError logs background errors: publishing the ResourceSlice (the
// helper retries) or a failed gRPC server, after which the test waiting
// for the driver fails and its log says why.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg, "recoverable", errors.Is(err, kubeletplugin.ErrRecoverable))
}

// WatchHealthStatus is not served (Start turns the health service off).
func (d *Driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
