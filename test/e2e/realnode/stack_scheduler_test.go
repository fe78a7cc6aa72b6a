package realnode

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender"
	"github.com/runplane/runplane/extender/profile"
	"github.com/runplane/runplane/test/cluster"
)

// realSpec is the catalog's GPU spec for the real node: one fake GPU and a
// sliver of its two cores, placed on the real node by the spec itself
// (nodeSelector and toleration), so GPU Pods and placeholders go there
// through the webhook like on any GPU node pool.
const realSpec = "rn1"

// catalog is the GPU spec catalog of this stack (the ConfigMap the chart
// renders from gpuSpecs).
var catalog = map[string]string{
	realSpec: `gpu: 1
cpu: 100m
memory: 64Mi
nodeSelector: {"` + cluster.RealNodeLabel + `": "true"}
tolerations: [{key: "` + cluster.RealNodeTaint + `", operator: Exists, effect: NoSchedule}]
`,
}

// startScheduler creates what the chart installs for GPU Pods (the
// catalog, runplane's PriorityClasses) and runs the extender in-process and
// the runplane-scheduler (a kube-scheduler with the runplane profile)
// calling it.
func startScheduler(ctx context.Context, log *slog.Logger, goRun func(string, func() error)) error {
	c := env.Client()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: api.CatalogConfigMap, Namespace: api.DefaultNamespace}, Data: catalog}
	if _, err := c.CoreV1().ConfigMaps(api.DefaultNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the catalog: %w", err)
	}
	// The chart's values: placeholders lowest, workloads above.
	for name, value := range map[string]int32{api.PriorityClassStock: -100, api.PriorityClassBatch: 100,
		api.PriorityClassWorkload: 1000, api.PriorityClassWorkloadHigh: 2000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := c.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating PriorityClass %s: %w", name, err)
		}
	}
	// controller-runtime's global logger (the managers' own logs) goes to
	// components.log too.
	ctrllog.SetLogger(logr.FromSlogHandler(log.With("component", "controller-runtime").Handler()))
	ext, err := extender.Start(ctx, extender.Config{RESTConfig: env.RESTConfig(), Addr: "127.0.0.1:0", Logger: log.With("component", "extender")})
	if err != nil {
		return fmt.Errorf("extender: %w", err)
	}
	goRun("extender", ext.Wait)
	cfg, err := profile.SchedulerConfig(profile.Options{URLPrefix: "https://" + ext.Addr(), CAData: ext.CACert()})
	if err != nil {
		return fmt.Errorf("scheduler profile: %w", err)
	}
	if _, err := env.StartScheduler(ctx, cfg); err != nil {
		return fmt.Errorf("runplane-scheduler: %w", err)
	}
	return nil
}
