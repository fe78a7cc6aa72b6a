package webhook

import (
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/runplane/runplane/api"
)

// Identities the webhook and runplane's ValidatingAdmissionPolicies trust.
// They are decided from the admission request's userInfo, which the API
// server fills from the authenticated requester: nothing a tenant writes
// into an object can change them.
const (
	serviceAccountPrefix    = "system:serviceaccount:"
	kubeSystemAccountPrefix = serviceAccountPrefix + "kube-system:"
	controllerManagerUser   = "system:kube-controller-manager"
	// resourceClaimControllerAccount is the kube-system ServiceAccount of
	// kube-controller-manager's resource-claim controller (its Pods'
	// claims from their templates) with per-controller credentials.
	resourceClaimControllerAccount = "resource-claim-controller"
	mastersGroup                   = "system:masters"
	nodesGroup                     = "system:nodes"
)

// runplaneAccount reports whether the requester is one of runplane's own
// ServiceAccounts: those of runplane's namespace.
func runplaneAccount(namespace string, u authenticationv1.UserInfo) bool {
	return strings.HasPrefix(u.Username, serviceAccountPrefix+namespace+":")
}

// kubeController reports whether the requester is Kubernetes' controller
// manager (as its own user or its per-controller ServiceAccounts in
// kube-system) or a cluster admin: the ones that create Pods from the Jobs
// and ReplicaSets runplane's controller owns.
func kubeController(u authenticationv1.UserInfo) bool {
	return u.Username == controllerManagerUser || strings.HasPrefix(u.Username, kubeSystemAccountPrefix) ||
		slices.Contains(u.Groups, mastersGroup)
}

// runplaneOwnPod reports whether a Pod being created is one of runplane's
// own (prepare Jobs, accessors): created by runplane's ServiceAccounts
// directly, or created by the Kubernetes controllers with runplane's
// managed-by label, which the runplane-managed-by policy lets nobody but
// runplane put on a Pod or on the workload it derives from.
func runplaneOwnPod(namespace string, u authenticationv1.UserInfo, labels map[string]string) bool {
	if runplaneAccount(namespace, u) {
		return true
	}
	return labels[api.LabelManagedBy] == api.ManagedByController && kubeController(u)
}
