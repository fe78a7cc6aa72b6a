// Package api is runplane's shared vocabulary: the label and annotation keys
// of the user surface (DESIGN.md "The user surface"), the names runplane
// gives the objects it creates, and their allowed values. It holds constants
// only, so every component can import it without pulling in behaviour.
package api

// Prefix is the domain every runplane label and annotation lives under.
const Prefix = "runplane.io/"

// Pod labels: they select, so the webhook's objectSelectors match on them.
const (
	// LabelGPUSpec makes a Pod a GPU workload of the named catalog spec.
	LabelGPUSpec = Prefix + "gpu-spec"
	// LabelStock makes a Pod a stock placeholder of the named catalog spec.
	LabelStock = Prefix + "stock"
	// LabelPool makes a Pod a serverless worker of the named pool. On a
	// Deployment it marks the workload that owns the pool's Pods.
	LabelPool = Prefix + "pool"
	// LabelSSH with value SSHEnabled runs an SSH server in the Pod's main
	// container (in front of its command).
	LabelSSH = Prefix + "ssh"
	// LabelEgress with value EgressRestricted puts the Pod under runplane's
	// egress restriction (controllers/egress: the AdminNetworkPolicy
	// runplane-egress, or the controller's NetworkPolicy).
	LabelEgress = Prefix + "egress"
	// LabelSSHPod is written by the SSH Service controller on an SSH Pod,
	// with the Pod's UID as value (always a valid label value, unlike long
	// Pod names): the Pod's SSH Service selects exactly that Pod by it.
	LabelSSHPod = Prefix + "ssh-pod"
)

// Label values.
const (
	SSHEnabled       = "enabled"
	EgressRestricted = "restricted"
	AccessorEnabled  = "enabled"
)

// Pod annotations that configure.
const (
	AnnotationFrameworkSocket     = Prefix + "framework-socket"
	AnnotationFrameworkInvokePath = Prefix + "framework-invoke-path"
	AnnotationFrameworkHealthPath = Prefix + "framework-health-path"
	AnnotationConcurrency         = Prefix + "concurrency"
	AnnotationSSHAuthorizedKeys   = Prefix + "ssh-authorized-keys"
	AnnotationSSHServiceType      = Prefix + "ssh-service-type"
	// AnnotationWorkerResources overrides the requests and limits of the
	// injected runplane-worker sidecar, key by key:
	// "requests.cpu=100m,limits.memory=512Mi". AnnotationSSHResources did
	// so for the SSH sidecar, which is gone: it is denied, saying so.
	AnnotationWorkerResources = Prefix + "worker-resources"
	AnnotationSSHResources    = Prefix + "ssh-resources"
)

// Pod annotations that runplane writes.
const (
	// AnnotationInjected records what the webhook injected and a hash of the
	// injection config, so a reinvocation is a no-op.
	AnnotationInjected = Prefix + "injected"
	// AnnotationSSHEndpoint says how to reach a Pod's SSH server.
	AnnotationSSHEndpoint = Prefix + "ssh-endpoint"
	// AnnotationClaimedStock is written by the extender on a GPU Pod before
	// it deletes the stock placeholder the Pod takes over:
	// "<node>/<namespace>/<name>/<uid>" of that placeholder. A restarted
	// extender reads it to keep the claim, so no placeholder is claimed twice.
	AnnotationClaimedStock = Prefix + "claimed-stock"
	// LabelReservedFor, on a reservation Pod the extender creates in its
	// own namespace (and trusts nowhere else), is the UID of the GPU Pod
	// that preempted for the room the reservation holds;
	// AnnotationReservedFor is that Pod's "<namespace>/<name>".
	LabelReservedFor      = Prefix + "reserved-for"
	AnnotationReservedFor = Prefix + "reserved-for"
	// FinalizerReservation holds a reservation Pod, deleted at once after
	// its creation, until the extender releases it: the kubelet stops it
	// (it never holds the node's resources there) while every scheduler
	// still counts it (extender/README.md, "Priority tiers and preemption").
	FinalizerReservation = Prefix + "reservation"
)

// Pool policy annotations, on the workload (Deployment) that owns a pool.
const (
	AnnotationMinAvailable    = Prefix + "min-available"
	AnnotationMaxReplicas     = Prefix + "max-replicas"
	AnnotationIdleTimeout     = Prefix + "idle-timeout"
	AnnotationMinRequestCount = Prefix + "min-request-count"
	AnnotationStartupTimeout  = Prefix + "startup-timeout"
	// AnnotationMaxBacklog bounds the pool's queued invocations (the
	// ingress answers 429 beyond); AnnotationMaxInFlight bounds its
	// dispatched ones (the activator holds the rest queued). Both are also
	// bounded by the namespace's limits.
	AnnotationMaxBacklog  = Prefix + "max-backlog"
	AnnotationMaxInFlight = Prefix + "max-in-flight"
)

// Pool execution annotations, on the Pod template of the pool's workload
// (next to runplane.io/concurrency): the webhook validates them on every
// worker Pod and the activator reads them from the template.
const (
	// AnnotationTimeoutSeconds is the pool's longest execution time: the
	// default and the maximum of an invocation's timeoutSeconds, and what
	// the webhook sizes the Pod's terminationGracePeriodSeconds from, so a
	// rollout lets running invocations finish.
	AnnotationTimeoutSeconds = Prefix + "timeout-seconds"
	// AnnotationMaxRetries is how many times a failed execution is run
	// again (default 0: never).
	AnnotationMaxRetries = Prefix + "max-retries"
	// AnnotationCallbackURL, on a pool's Deployment, is the completion
	// callback of its invocations that name none (queue/callback).
	AnnotationCallbackURL = Prefix + "callback-url"
	// AnnotationRetryOn says which failures are retried: a comma-separated
	// list of "error", "timeout", HTTP status codes and classes ("5xx").
	AnnotationRetryOn = Prefix + "retry-on"
	// AnnotationRetryBackoff is the delay before the first retry, doubled
	// for each further one.
	AnnotationRetryBackoff = Prefix + "retry-backoff"
)

// PersistentVolumeClaim annotations that configure.
const (
	AnnotationPrepareFromImage = Prefix + "prepare-from-image"
	AnnotationPrepareCommand   = Prefix + "prepare-command"
	AnnotationPrepareArgs      = Prefix + "prepare-args"
	AnnotationPrepareFromPVC   = Prefix + "prepare-from-pvc"
	AnnotationPrepareAttempt   = Prefix + "prepare-attempt"
	AnnotationAccessor         = Prefix + "accessor"
)

// PersistentVolumeClaim annotations that runplane writes.
const (
	AnnotationPreparePhase           = Prefix + "prepare-phase"
	AnnotationPrepareJob             = Prefix + "prepare-job"
	AnnotationPrepareMessage         = Prefix + "prepare-message"
	AnnotationPrepareObservedAttempt = Prefix + "prepare-observed-attempt"
	AnnotationAccessorURL            = Prefix + "accessor-url"
	AnnotationAccessorPhase          = Prefix + "accessor-phase"
)

// Preparation phases (AnnotationPreparePhase).
const (
	PhasePending   = "Pending"
	PhaseRunning   = "Running"
	PhaseSucceeded = "Succeeded"
	PhaseFailed    = "Failed"
)

// Accessor phases (AnnotationAccessorPhase).
const (
	AccessorPending = "Pending"
	AccessorReady   = "Ready"
	AccessorFailed  = "Failed"
)

// Labels runplane puts on the objects its controller creates, so the
// controller's caches watch only those (Jobs, Deployments, Services,
// NetworkPolicies, Secrets).
const (
	LabelManagedBy      = "app.kubernetes.io/managed-by"
	ManagedByController = "runplane-controller"
)

// Names of cluster objects runplane relies on.
const (
	// DefaultNamespace is where runplane runs, in the chart and in make dev.
	DefaultNamespace = "runplane-system"
	// DefaultStockNamespace is the only namespace where stock placeholders
	// may be created, in the chart (stock.namespace) and in make dev: a
	// placeholder holds GPUs at a priority tenants' Pods cannot preempt.
	DefaultStockNamespace = "runplane-stock"
	// CatalogConfigMap holds the GPU spec catalog, one data key per spec.
	CatalogConfigMap = "runplane-gpu-specs"
	// NATSCAConfigMap, in runplane's namespace, holds under NATSCAKey the
	// PEM CAs a NATS client verifies the server's certificate with (public
	// certificates only): the queue publishes the bundled NATS's, the chart
	// an external NATS's; the webhook gives it to every worker sidecar.
	NATSCAConfigMap = "runplane-nats-ca"
	NATSCAKey       = "ca.crt"
	// SchedulerName is the kube-scheduler profile that schedules GPU Pods.
	SchedulerName = "runplane-scheduler"
	// PriorityClassWorkload is given to GPU workloads.
	PriorityClassWorkload = "runplane-workload"
	// AnnotationPriorityTiers, on a Namespace, lists (comma-separated) the
	// GPU priority tiers above runplane-workload its Pods may name: a tier
	// that preempts other tenants' work is the platform's to grant, and a
	// tenant cannot annotate its own Namespace.
	AnnotationPriorityTiers = Prefix + "priority-tiers"
	// LabelNVLinkDomainGPUs is a node label: how many GPUs its largest
	// NVLink domain holds. Specs with nvlink: true only go to nodes where
	// it is at least their GPU count.
	LabelNVLinkDomainGPUs = "runplane.io/nvlink-domain-gpus"
	// PriorityClassStock is given to stock placeholders (the lowest).
	PriorityClassStock = "runplane-stock"
	// PriorityClassSystem is runplane's own Pods' (webhook, scheduler and
	// extender, queue, controllers, NATS): above every workload tier, so
	// no GPU workload preempts what every GPU Pod depends on.
	PriorityClassSystem = "runplane-system"
	// PriorityClassWorkloadHigh and PriorityClassBatch are the chart's
	// other default GPU tiers: above runplane-workload (preempts it) and
	// below it (preempted first).
	PriorityClassWorkloadHigh = "runplane-workload-high"
	PriorityClassBatch        = "runplane-batch"
	// SchedulingGateStorage holds a Pod until its PVCs are prepared.
	SchedulingGateStorage = Prefix + "storage-prepared"
	// DefaultGPUResource is the extended resource a spec's GPUs are counted in.
	DefaultGPUResource = "nvidia.com/gpu"
	// DefaultPauseImage runs stock placeholders (the webhook) and
	// preemptors' reservation Pods (the extender).
	DefaultPauseImage = "registry.k8s.io/pause:3.10"
)

// Serverless defaults shared by the webhook, the queue and the sidecar.
const (
	DefaultFrameworkSocket     = "/tmp/serverless-framework/framework.sock"
	DefaultFrameworkInvokePath = "/invoke"
	DefaultFrameworkHealthPath = "/healthz"
	DefaultSubjectPrefix       = "runtime.serverless"
	DefaultStreamName          = "RUNTIME_SERVERLESS"
)
