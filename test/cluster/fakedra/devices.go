// Package fakedra is a DRA kubelet driver for GPUs a machine does not have,
// so that Dynamic Resource Allocation can be run end to end on a real
// kubelet without GPUs. It publishes a node's fake GPUs as a ResourceSlice
// and prepares allocated ResourceClaims the way NVIDIA's DRA driver
// (github.com/NVIDIA/k8s-dra-driver-gpu) does: under the driver name
// gpu.nvidia.com, with that driver's device names and attributes, and one
// CDI spec file per claim that the container runtime injects — per device
// a device node /dev/nvidia<minor> (a character device with /dev/null's
// numbers) and NVIDIA_VISIBLE_DEVICES naming the claim's GPUs by UUID.
//
// The kubelet side (registration, the DRA gRPC service, publishing and
// reconciling ResourceSlices, fetching claims) is
// k8s.io/dynamic-resource-allocation/kubeletplugin; this package supplies
// only what a driver decides: which devices exist and what a prepared
// claim puts into a container.
package fakedra

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/catalog"
)

// Names as NVIDIA's DRA driver publishes them.
const (
	// DriverName is the driver, and the name of the DeviceClass of its
	// full GPUs (the catalog's names: one definition).
	DriverName = catalog.GPUDriver
	// MIGDeviceClass is the DeviceClass of MIG partitions (type "mig"); the
	// fake publishes none, the class exists so that specs naming it resolve.
	MIGDeviceClass = catalog.MIGDeviceClass
	// TypeGPU and TypeMIG are the values of the "type" attribute.
	TypeGPU = "gpu"
	TypeMIG = "mig"
	// ProductName is what every fake GPU calls itself.
	ProductName = "NVIDIA H100 80GB HBM3"
	// Architecture of ProductName, as NVML names it.
	Architecture = "Hopper"
	// NVLinkDomainAttribute says which GPUs share an NVLink domain. NVIDIA's
	// GPU kubelet plugin publishes no per-GPU NVLink attribute (its clique
	// ID belongs to ComputeDomains), so runplane qualifies its own.
	NVLinkDomainAttribute resourceapi.QualifiedName = catalog.NVLinkDomainAttribute
)

// Attribute and capacity names of the driver's devices (unqualified:
// they belong to the driver's domain, gpu.nvidia.com).
const (
	AttrType         resourceapi.QualifiedName = "type"
	AttrUUID         resourceapi.QualifiedName = "uuid"
	AttrProductName  resourceapi.QualifiedName = "productName"
	AttrBrand        resourceapi.QualifiedName = "brand"
	AttrArchitecture resourceapi.QualifiedName = "architecture"
	AttrIndex        resourceapi.QualifiedName = "index"
	AttrMinor        resourceapi.QualifiedName = "minor"
	AttrCUDACompute  resourceapi.QualifiedName = "cudaComputeCapability"
	AttrDriver       resourceapi.QualifiedName = "driverVersion"
	CapacityMemory   resourceapi.QualifiedName = "memory"
)

// GPUMemory is each fake GPU's memory capacity.
var GPUMemory = resource.MustParse("80Gi")

// DeviceName is the i-th GPU's device name in the ResourceSlice: the
// driver's canonical name, from the GPU's minor number (= i here).
func DeviceName(i int) string { return "gpu-" + strconv.Itoa(i) }

// deviceIndex parses a DeviceName, or says why it is not one of count GPUs.
func deviceIndex(name string, count int) (int, error) {
	rest, ok := strings.CutPrefix(name, "gpu-")
	i, err := strconv.Atoi(rest)
	if !ok || err != nil || i < 0 || i >= count || DeviceName(i) != name {
		return 0, fmt.Errorf("unknown device %q: this node has %s to %s", name, DeviceName(0), DeviceName(count-1))
	}
	return i, nil
}

// DevicePath is where the i-th GPU appears in a container.
func DevicePath(i int) string { return "/dev/nvidia" + strconv.Itoa(i) }

// uuidSpace makes GPU UUIDs stable per node and index, and distinct
// across nodes (as real GPUs' are).
var uuidSpace = uuid.MustParse("6f1a0c52-5a3b-4f4e-9d0e-2b8f6f0d7c11")

// GPUUUID is the UUID of node's i-th GPU, in nvidia-smi's form
// "GPU-<uuid>".
func GPUUUID(node string, i int) string {
	return "GPU-" + uuid.NewSHA1(uuidSpace, []byte(node+"/"+strconv.Itoa(i))).String()
}

// Devices are the count GPUs of node as the driver publishes them, all in
// NVLink domain nvlinkDomain (none when it is empty).
func Devices(node string, count int, nvlinkDomain string) []resourceapi.Device {
	devs := make([]resourceapi.Device, count)
	for i := range devs {
		devs[i] = resourceapi.Device{
			Name: DeviceName(i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				AttrType:         {StringValue: ptr.To(TypeGPU)},
				AttrUUID:         {StringValue: ptr.To(GPUUUID(node, i))},
				AttrProductName:  {StringValue: ptr.To(ProductName)},
				AttrBrand:        {StringValue: ptr.To("Nvidia")},
				AttrArchitecture: {StringValue: ptr.To(Architecture)},
				AttrIndex:        {IntValue: ptr.To(int64(i))},
				AttrMinor:        {IntValue: ptr.To(int64(i))},
				AttrCUDACompute:  {VersionValue: ptr.To("9.0.0")},
				AttrDriver:       {VersionValue: ptr.To("580.95.5")},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				CapacityMemory: {Value: GPUMemory},
			},
		}
		if nvlinkDomain != "" {
			devs[i].Attributes[NVLinkDomainAttribute] = resourceapi.DeviceAttribute{StringValue: ptr.To(nvlinkDomain)}
		}
	}
	return devs
}

// DeviceClasses are the classes NVIDIA's driver installs: gpu.nvidia.com
// for full GPUs and mig.nvidia.com for MIG partitions, each selecting the
// driver's devices of its type.
func DeviceClasses() []*resourceapi.DeviceClass {
	class := func(name, typ string) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q && device.attributes[%q].type == %q", DriverName, DriverName, typ),
			}}}},
		}
	}
	return []*resourceapi.DeviceClass{class(DriverName, TypeGPU), class(MIGDeviceClass, TypeMIG)}
}
