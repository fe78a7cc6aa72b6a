// Package priorityclass defines runplane's PriorityClasses once: make dev
// creates these objects and the chart renders the same ones from its default
// values (charts/runplane's TestPriorityClassesMatchDev compares them).
package priorityclass

import (
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
)

// Defaults of the chart's priorityClasses.workload.value and .stock.value.
const (
	WorkloadValue int32 = 1000
	// StockValue is below every ordinary Pod (priority 0): anything may
	// preempt a placeholder.
	StockValue int32 = -1000
	// HighValue and BatchValue are the chart's default priorityClasses.tiers.
	HighValue  int32 = 2000
	BatchValue int32 = 100
	// SystemValue is runplane's own Pods' priority (priorityClasses.system):
	// above any workload tier (the chart refuses a tier at or above it),
	// below Kubernetes' system-cluster-critical (2,000,000,000). The
	// extender never picks a Pod at or above it as a victim.
	SystemValue int32 = 1_000_000
)

// Defaults returns runplane-workload, the default tiers, runplane-stock and
// runplane-system as the chart's default values render them.
func Defaults() []schedulingv1.PriorityClass {
	preempt, never := corev1.PreemptLowerPriority, corev1.PreemptNever
	return []schedulingv1.PriorityClass{
		{
			ObjectMeta: metav1.ObjectMeta{Name: api.PriorityClassWorkload}, Value: WorkloadValue, PreemptionPolicy: &preempt,
			Description: "GPU workloads admitted by runplane (label runplane.io/gpu-spec).",
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: api.PriorityClassWorkloadHigh}, Value: HighValue, PreemptionPolicy: &preempt,
			Description: "Paid GPU workloads that preempt runplane-workload and runplane-batch.",
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: api.PriorityClassBatch}, Value: BatchValue, PreemptionPolicy: &preempt,
			Description: "Batch/spot GPU workloads, the first to be preempted.",
		},
		{
			// A placeholder waits for capacity (the signal for a cluster
			// autoscaler); it never evicts anything.
			ObjectMeta: metav1.ObjectMeta{Name: api.PriorityClassStock}, Value: StockValue, PreemptionPolicy: &never,
			Description: "runplane stock placeholders (label runplane.io/stock), the lowest priority; GPU workloads take them over.",
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: api.PriorityClassSystem}, Value: SystemValue, PreemptionPolicy: &preempt,
			Description: "runplane's own Pods, above every GPU workload tier: no workload preempts them, and the extender never evicts them.",
		},
	}
}
