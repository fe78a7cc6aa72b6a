package cmdline

import (
	"fmt"

	"k8s.io/client-go/rest"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
)

// RESTConfig is the cluster of a binary that talks to Kubernetes, found the
// way every controller-runtime binary finds it (ctrl.GetConfig): the
// -kubeconfig flag (controller-runtime registers it on flag.CommandLine),
// $KUBECONFIG, the in-cluster config, ~/.kube/config. Like controller-runtime
// it turns client-side rate limiting off (the API server's priority and
// fairness limits), unless a component sets its own. A cluster that cannot
// be found is a bad configuration (Usage).
func RESTConfig() (*rest.Config, error) {
	rc, err := ctrlconfig.GetConfig()
	if err != nil {
		return nil, Usage(fmt.Errorf("kubeconfig (-kubeconfig, $KUBECONFIG or in-cluster): %w", err))
	}
	return rc, nil
}
