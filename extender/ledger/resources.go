package ledger

import (
	corev1 "k8s.io/api/core/v1"
)

// Resources is an amount of node capacity. CPU is in millicores, memory and
// every scalar resource (extended resources such as nvidia.com/gpu,
// ephemeral-storage, hugepages) in their base unit, Pods in Pod slots.
type Resources struct {
	MilliCPU int64
	Memory   int64
	Pods     int64
	Scalar   map[corev1.ResourceName]int64
}

// FromList converts a ResourceList (a node's allocatable).
func FromList(list corev1.ResourceList) Resources {
	var r Resources
	for name, q := range list {
		switch name {
		case corev1.ResourceCPU:
			r.MilliCPU = q.MilliValue()
		case corev1.ResourceMemory:
			r.Memory = q.Value()
		case corev1.ResourcePods:
			r.Pods = q.Value()
		default:
			if r.Scalar == nil {
				r.Scalar = map[corev1.ResourceName]int64{}
			}
			r.Scalar[name] = q.Value()
		}
	}
	return r
}

// PodRequests is what a Pod takes from its node: the larger of its regular
// containers plus its restartable (sidecar) init containers and its peak
// init-container demand, plus the Pod overhead, plus one Pod slot. It is
// the kubelet's admission arithmetic, kept local so the ledger agrees with
// what the node will actually accept.
func PodRequests(pod *corev1.Pod) Resources {
	var total Resources
	for i := range pod.Spec.Containers {
		total.add(FromList(pod.Spec.Containers[i].Resources.Requests))
	}
	var sidecars, initPeak Resources
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		req := FromList(c.Resources.Requests)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars.add(req)
			initPeak.max(sidecars)
			continue
		}
		req.add(sidecars)
		initPeak.max(req)
	}
	total.add(sidecars)
	total.max(initPeak)
	if pod.Spec.Overhead != nil {
		total.add(FromList(pod.Spec.Overhead))
	}
	total.Pods = 1
	return total
}

func (r *Resources) add(o Resources) {
	r.MilliCPU += o.MilliCPU
	r.Memory += o.Memory
	r.Pods += o.Pods
	for k, v := range o.Scalar {
		if r.Scalar == nil {
			r.Scalar = make(map[corev1.ResourceName]int64, len(o.Scalar))
		}
		r.Scalar[k] += v
	}
}

func (r *Resources) max(o Resources) {
	r.MilliCPU = max(r.MilliCPU, o.MilliCPU)
	r.Memory = max(r.Memory, o.Memory)
	r.Pods = max(r.Pods, o.Pods)
	for k, v := range o.Scalar {
		if r.Scalar == nil {
			r.Scalar = make(map[corev1.ResourceName]int64, len(o.Scalar))
		}
		r.Scalar[k] = max(r.Scalar[k], v)
	}
}
