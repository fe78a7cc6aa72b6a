// Package fakegpu is a kubelet device plugin that advertises GPUs a machine
// does not have, so that GPU visibility can be checked on a real kubelet
// without GPUs. Each allocated container gets, per device, its own device
// node /dev/nvidia<i> (a character device with /dev/null's numbers) and
// NVIDIA_VISIBLE_DEVICES listing exactly its devices, which is what the
// NVIDIA container toolkit gives a container on a real GPU node.
//
// It speaks the kubelet device plugin API (k8s.io/kubelet
// pkg/apis/deviceplugin/v1beta1) over gRPC: it serves on a unix socket in
// the kubelet's device-plugin directory and registers there with the
// kubelet.
package fakegpu

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// DeviceID is the ID of the i-th fake GPU, the form nvidia's plugin uses.
func DeviceID(i int) string { return "GPU-fake-" + strconv.Itoa(i) }

// DevicePath is where the i-th fake GPU appears in a container.
func DevicePath(i int) string { return "/dev/nvidia" + strconv.Itoa(i) }

// Plugin advertises Count devices of Resource.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	// Dir is the kubelet's device-plugin directory as seen by this process
	// (<kubelet root>/device-plugins); kubelet.sock is there.
	Dir      string
	Resource string
	Count    int
	// HostDevice is the device node bound in for each GPU (default /dev/null).
	HostDevice string
}

// Run serves the plugin and registers it with the kubelet, until ctx ends.
// It returns once the kubelet accepted the registration; serving goes on in
// the background. The returned channel closes when serving stops.
func (p *Plugin) Run(ctx context.Context) (<-chan struct{}, error) {
	if p.Count <= 0 || p.Resource == "" || p.Dir == "" {
		return nil, fmt.Errorf("fake GPU plugin: want Dir, Resource and a positive Count, got %+v", *p)
	}
	endpoint := "fakegpu.sock"
	sock := filepath.Join(p.Dir, endpoint)
	if err := os.Remove(sock); err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("fake GPU plugin: %w", err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("fake GPU plugin: listening on %s: %w", sock, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.Dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		return nil, fmt.Errorf("fake GPU plugin: dialing the kubelet: %w", err)
	}
	defer conn.Close()
	regCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(regCtx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: p.Resource,
	}, grpc.WaitForReady(true))
	if err != nil {
		srv.Stop()
		return nil, fmt.Errorf("fake GPU plugin: registering %s with the kubelet: %w", p.Resource, err)
	}
	return done, nil
}

// GetDevicePluginOptions: no pre-start hook, no preferred allocation.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices once, all healthy, and keeps the stream
// open (the kubelet takes a closed stream for a gone plugin).
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	devs := make([]*pluginapi.Device, p.Count)
	for i := range devs {
		devs[i] = &pluginapi.Device{ID: DeviceID(i), Health: pluginapi.Healthy}
	}
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return fmt.Errorf("sending devices: %w", err)
	}
	<-stream.Context().Done()
	return nil
}

// Allocate gives each container its devices' nodes and
// NVIDIA_VISIBLE_DEVICES.
func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, creq := range req.ContainerRequests {
		cresp, err := p.allocate(creq.DevicesIds)
		if err != nil {
			return nil, err
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
	}
	return resp, nil
}

func (p *Plugin) allocate(ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	host := p.HostDevice
	if host == "" {
		host = "/dev/null"
	}
	var idx []int
	for _, id := range ids {
		n, err := strconv.Atoi(strings.TrimPrefix(id, "GPU-fake-"))
		if err != nil || !strings.HasPrefix(id, "GPU-fake-") || n < 0 || n >= p.Count {
			return nil, fmt.Errorf("fake GPU plugin: unknown device %q", id)
		}
		idx = append(idx, n)
	}
	sort.Ints(idx)
	resp := &pluginapi.ContainerAllocateResponse{}
	var visible []string
	for _, n := range idx {
		resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: DevicePath(n), HostPath: host, Permissions: "rw"})
		visible = append(visible, DeviceID(n))
	}
	resp.Envs = map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(visible, ",")}
	return resp, nil
}
