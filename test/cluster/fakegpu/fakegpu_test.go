package fakegpu

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// registry stands in for the kubelet's registration service: the plugin's
// side of the protocol is what is under test, over real gRPC on unix sockets.
type registry struct {
	pluginapi.UnimplementedRegistrationServer
	got chan *pluginapi.RegisterRequest
}

func (r *registry) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	r.got <- req
	return &pluginapi.Empty{}, nil
}

func TestPluginRegistersListsAndAllocates(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	require.NoError(t, err)
	reg := &registry{got: make(chan *pluginapi.RegisterRequest, 1)}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, reg)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	defer func() { srv.Stop(); assert.NoError(t, <-served) }() // Serve returns nil after Stop

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := &Plugin{Dir: dir, Resource: "nvidia.com/gpu", Count: 4}
	done, err := p.Run(ctx)
	require.NoError(t, err)
	req := <-reg.got
	require.Equal(t, "nvidia.com/gpu", req.ResourceName)
	require.Equal(t, pluginapi.Version, req.Version)

	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client := pluginapi.NewDevicePluginClient(conn)
	stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
	require.NoError(t, err)
	list, err := stream.Recv()
	require.NoError(t, err)
	require.Len(t, list.Devices, 4)
	require.Equal(t, DeviceID(3), list.Devices[3].ID)
	require.Equal(t, pluginapi.Healthy, list.Devices[3].Health)

	resp, err := client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{DeviceID(2), DeviceID(0)}}, {DevicesIds: []string{DeviceID(3)}},
	}})
	require.NoError(t, err)
	require.Len(t, resp.ContainerResponses, 2)
	first := resp.ContainerResponses[0]
	require.Equal(t, "GPU-fake-0,GPU-fake-2", first.Envs["NVIDIA_VISIBLE_DEVICES"])
	require.Equal(t, []string{"/dev/nvidia0", "/dev/nvidia2"}, []string{first.Devices[0].ContainerPath, first.Devices[1].ContainerPath})
	require.Equal(t, "/dev/null", first.Devices[0].HostPath)
	require.Equal(t, "GPU-fake-3", resp.ContainerResponses[1].Envs["NVIDIA_VISIBLE_DEVICES"])

	_, err = client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-fake-9"}}}})
	require.ErrorContains(t, err, `unknown device "GPU-fake-9"`)

	cancel()
	<-done
}

func TestPluginRejectsBadOptions(t *testing.T) {
	_, err := (&Plugin{Dir: t.TempDir(), Resource: "nvidia.com/gpu"}).Run(context.Background())
	require.ErrorContains(t, err, "positive Count")
}
