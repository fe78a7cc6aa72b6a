package realnode

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/runplane/runplane/controllers"
	"github.com/runplane/runplane/hack/images"
	"github.com/runplane/runplane/test/cluster"
)

// startControllers runs runplane's controllers in-process: prepare Jobs
// (the copier of the runplane image), the storage gate and the accessor
// run on the real node.
//
// The real node is the cluster's only node, so its taint comes off here:
// the controller's Jobs and accessor Deployments carry no toleration, as
// on any node that takes ordinary Pods. Tests' own Pods keep pinning
// themselves to it (nodeSelector and toleration), which still holds.
func startControllers(ctx context.Context, log *slog.Logger, goRun func(string, func() error)) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := env.Client().CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == cluster.RealNodeTaint })
		_, err = env.Client().CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("untainting the real node: %w", err)
	}
	goRun("controllers", func() error {
		return controllers.Run(ctx, controllers.Config{
			RESTConfig: env.RESTConfig(), Image: images.RunplaneRef,
			// adminNetworkPolicy mode: the AdminNetworkPolicy
			// restrictEgress applied restricts pool Pods, as the chart's.
			Egress:      egressSettings,
			MetricsAddr: "0", ProbeAddr: "0",
			Logger: logr.FromSlogHandler(log.With("component", "controllers").Handler()),
		})
	})
	return nil
}
