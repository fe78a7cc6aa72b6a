package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Names as NVIDIA's DRA driver for GPUs (github.com/NVIDIA/k8s-dra-driver-gpu)
// publishes them: its driver name, its DeviceClasses (whole GPUs and MIG
// partitions, told apart by the device attribute "type"), and the
// qualified attribute runplane uses for the NVLink domain, which that
// driver does not publish on a GPU.
const (
	GPUDriver          = "gpu.nvidia.com"
	GPUDeviceClass     = "gpu.nvidia.com"
	MIGDeviceClass     = "mig.nvidia.com"
	NVLinkDomainAttr   = "runplane.io/nvlinkDomain"
	draGPUProduct      = "NVIDIA A100-SXM4-80GB"
	draGPUArchitecture = "Ampere"
	draGPUMemory       = "80Gi"
)

// DeviceClasses are the driver's classes: a Pod's claim names one, and the
// scheduler allocates the devices its selector admits.
func DeviceClasses() []*resourcev1.DeviceClass {
	class := func(name, typ string) *resourcev1.DeviceClass {
		return &resourcev1.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q && device.attributes[%q].type == %q", GPUDriver, GPUDriver, typ),
			}}}},
		}
	}
	return []*resourcev1.DeviceClass{class(GPUDeviceClass, "gpu"), class(MIGDeviceClass, "mig")}
}

// createDeviceClasses installs DeviceClasses, as the driver's chart does.
func (c *Cluster) createDeviceClasses(ctx context.Context) error {
	for _, dc := range DeviceClasses() {
		if _, err := c.client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating DeviceClass %s: %w", dc.Name, err)
		}
	}
	return nil
}

// GPUSlice is the ResourceSlice of a kwok node's DRA GPUs: one pool named
// after the node, devices gpu-0 … gpu-<n-1> with the driver's attributes
// (a kubelet plugin publishes the same for a real node). An empty domain
// leaves out the NVLink attribute.
func GPUSlice(nodeName string, gpus int, domain string) *resourcev1.ResourceSlice {
	devices := make([]resourcev1.Device, gpus)
	for i := range devices {
		attrs := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type":         {StringValue: ptr.To("gpu")},
			"index":        {IntValue: ptr.To(int64(i))},
			"uuid":         {StringValue: ptr.To(fmt.Sprintf("GPU-%s-%d", nodeName, i))},
			"productName":  {StringValue: ptr.To(draGPUProduct)},
			"architecture": {StringValue: ptr.To(draGPUArchitecture)},
		}
		if domain != "" {
			attrs[NVLinkDomainAttr] = resourcev1.DeviceAttribute{StringValue: ptr.To(domain)}
		}
		devices[i] = resourcev1.Device{
			Name:       fmt.Sprintf("gpu-%d", i),
			Attributes: attrs,
			Capacity:   map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse(draGPUMemory)}},
		}
	}
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName + "-" + GPUDriver},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   GPUDriver,
			NodeName: ptr.To(nodeName),
			Pool:     resourcev1.ResourcePool{Name: nodeName, Generation: 1, ResourceSliceCount: 1},
			Devices:  devices,
		},
	}
}

// publishGPUs creates the node's ResourceSlice when it has DRA GPUs.
func (c *Cluster) publishGPUs(ctx context.Context, n Node) error {
	if n.DRAGPUs <= 0 {
		return nil
	}
	slice := GPUSlice(n.Name, n.DRAGPUs, n.NVLinkDomain)
	if _, err := c.client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("publishing the DRA GPUs of node %s: %w", n.Name, err)
	}
	return nil
}

// GPUClaimTemplate is a ResourceClaimTemplate for count whole GPUs of
// GPUDeviceClass, in one request named "gpu", for tests that make the
// Pods of a DRA spec themselves.
func GPUClaimTemplate(namespace, name string, count int64) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: GPUDeviceClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count,
			}}},
		}}},
	}
}

// UseClaimTemplate gives a Pod spec the claim "gpu" from template, used
// by every app container: the shape of a GPU Pod of a DRA spec.
func UseClaimTemplate(spec *corev1.PodSpec, template string) {
	spec.ResourceClaims = append(spec.ResourceClaims, corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)})
	for i := range spec.Containers {
		spec.Containers[i].Resources.Claims = append(spec.Containers[i].Resources.Claims, corev1.ResourceClaim{Name: "gpu"})
	}
}
