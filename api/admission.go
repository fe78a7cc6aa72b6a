package api

// Admission integrity: what the webhook and the chart's
// ValidatingAdmissionPolicies reserve for runplane.
const (
	// ReservedPrefix is reserved for what runplane injects into a Pod:
	// a user container, init container, ephemeral container or volume
	// whose name starts with it is denied unless it is exactly what
	// runplane injects. Secrets whose name starts with it are runplane's:
	// no user container may reference one.
	ReservedPrefix = "runplane-"
	// ServiceAccountTokenMountPath is where the ServiceAccount admission
	// plugin mounts a Pod's API token into every container; the only mount
	// runplane accepts on its own containers besides its own.
	ServiceAccountTokenMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	// ServiceAccountTokenVolumePrefix names the ServiceAccount admission
	// plugin's token volume (kube-api-access-<random>).
	ServiceAccountTokenVolumePrefix = "kube-api-access-"
	// ImageUID is the user (and group) of the runplane image (distroless
	// nonroot): the containers, Jobs and accessors runplane runs from it
	// run as this user.
	ImageUID = int64(65532)
)

// Names of the ValidatingAdmissionPolicies runplane ships (chart and
// webhook -manage-webhooks), each bound by a binding of the same name.
const (
	// PolicyPodKeys keeps a Pod's runplane.io/ labels and annotations as
	// they were at creation, unless runplane changes them.
	PolicyPodKeys = "runplane-pod-keys"
	// PolicyManagedBy lets only runplane (and the Kubernetes controllers
	// that derive Pods from its objects) set LabelManagedBy=ManagedByController.
	PolicyManagedBy = "runplane-managed-by"
	// PolicyGPU admits GPU requests and runplane's PriorityClasses only on
	// Pods that runplane schedules (runplane.io/gpu-spec or runplane.io/stock).
	PolicyGPU = "runplane-gpu"
	// PolicyGPUClaims, on with PolicyGPU, admits ResourceClaims and
	// ResourceClaimTemplates of a GPU DeviceClass only from runplane (and
	// kube-controller-manager's claims for a Pod's template).
	PolicyGPUClaims = "runplane-gpu-claims"
	// PolicyNATSToken lets only the kubelet (for a Pod's projected volume)
	// and runplane mint ServiceAccount tokens for NATSTokenAudience.
	PolicyNATSToken = "runplane-nats-token"
	// PolicyNamespaceTiers lets only cluster admins (and the chart's
	// grantor groups) set or change a Namespace's AnnotationPriorityTiers.
	PolicyNamespaceTiers = "runplane-namespace-tiers"
	// PolicyClaimTemplates lets only runplane create, change or delete the
	// ResourceClaimTemplates of DRA GPU specs (named runplane-*, or
	// labelled LabelManagedBy=ManagedByController): GPU Pods claim their
	// devices from them.
	PolicyClaimTemplates = "runplane-claim-templates"
)
