package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/test/cluster/fakedra"
)

// GPUDriver is the driver kwok nodes' GPUs are published under: NVIDIA's
// (catalog.GPUDriver), as test/cluster/fakedra publishes a real node's.
const GPUDriver = fakedra.DriverName

// createDeviceClasses installs the driver's DeviceClasses, as its chart
// does (a real node's fake driver needs the same ones).
func (c *Cluster) createDeviceClasses(ctx context.Context) error {
	for _, dc := range fakedra.DeviceClasses() {
		if _, err := c.client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating DeviceClass %s: %w", dc.Name, err)
		}
	}
	return nil
}

// GPUSlice is the ResourceSlice of a kwok node's DRA GPUs: one pool named
// after the node, the devices the fake kubelet driver publishes for a real
// node (fakedra.Devices). An empty domain leaves out the NVLink attribute.
func GPUSlice(nodeName string, gpus int, domain string) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName + "-" + GPUDriver},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   GPUDriver,
			NodeName: ptr.To(nodeName),
			Pool:     resourcev1.ResourcePool{Name: nodeName, Generation: 1, ResourceSliceCount: 1},
			Devices:  fakedra.Devices(nodeName, gpus, domain),
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
				DeviceClassName: fakedra.DriverName, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count,
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
