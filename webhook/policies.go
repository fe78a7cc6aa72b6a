package webhook

//go:generate go run ../hack/admgen/cmd/admgen -chart ../charts/runplane

import (
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
)

// PodLabels and PodAnnotations are the runplane.io/ keys a Pod may carry;
// any other is denied at creation.
func PodLabels() []string {
	return []string{api.LabelGPUSpec, api.LabelStock, api.LabelPool, api.LabelSSH, api.LabelEgress, api.LabelSSHPod}
}

// PodAnnotations: see PodLabels.
func PodAnnotations() []string {
	return []string{api.AnnotationFrameworkSocket, api.AnnotationFrameworkInvokePath, api.AnnotationFrameworkHealthPath,
		api.AnnotationConcurrency, api.AnnotationSSHAuthorizedKeys, api.AnnotationSSHServiceType,
		api.AnnotationWorkerResources, api.AnnotationSSHResources,
		api.AnnotationInjected, api.AnnotationSSHEndpoint, api.AnnotationClaimedStock}
}

// writtenPodKeys are written by runplane's controllers and extender, which
// act on them: no Pod is created with one (but by runplane).
// runplane.io/injected is written by the webhook in the same request, and
// recomputed there, never trusted.
func writtenPodKeys() (labels, annotations []string) {
	return []string{api.LabelSSHPod}, []string{api.AnnotationSSHEndpoint, api.AnnotationClaimedStock}
}

// PolicyOptions shapes runplane's ValidatingAdmissionPolicies.
type PolicyOptions struct {
	// Namespace is runplane's namespace: its ServiceAccounts are
	// runplane's own; it and kube-system are not checked.
	Namespace string
	// ExcludeNamespaces are also not checked (the webhook's list).
	ExcludeNamespaces []string
	// GPU enables the runplane-gpu policy when not nil.
	GPU *GPUPolicy
	// TierGrantorGroups may set a Namespace's runplane.io/priority-tiers
	// besides cluster admins (system:masters): the platform's own admins
	// where they are not in system:masters.
	TierGrantorGroups []string
}

// GPUPolicy says which resources are GPUs: every resource named here and
// every resource under one of the prefixes, and the devices of
// DeviceClasses.
type GPUPolicy struct {
	Resources []string
	Prefixes  []string
	// DeviceClasses are the DRA DeviceClasses of GPUs (the catalog's DRA
	// specs'): runplane-gpu-claims admits a ResourceClaim or
	// ResourceClaimTemplate of one only from runplane, and runplane-gpu
	// counts their extended resources (deviceclass.resource.kubernetes.io/<class>,
	// which the scheduler turns into a claim) as GPUs.
	DeviceClasses []string
	// WorkloadPriorityClasses are the priority tiers only GPU Pods may use
	// besides runplane-workload, which always is one.
	WorkloadPriorityClasses []string
}

// DefaultGPUPolicy counts nvidia.com/* and the DeviceClasses of NVIDIA's
// DRA driver as GPUs.
func DefaultGPUPolicy() *GPUPolicy {
	return &GPUPolicy{Resources: []string{api.DefaultGPUResource}, Prefixes: []string{"nvidia.com/"},
		DeviceClasses: []string{catalog.GPUDeviceClass, catalog.MIGDeviceClass}}
}

// Policies returns runplane's ValidatingAdmissionPolicies and their
// bindings (one binding per policy, of the same name). They run in the API
// server itself: no webhook call, no dependency on the webhook being up,
// and they see every Pod, labelled or not.
//   - runplane-pod-keys: on CREATE of a Pod, no unknown runplane.io/ key
//     and none that runplane writes (ssh-pod, ssh-endpoint, claimed-stock);
//     on UPDATE of a Pod (and pods/status), its
//     runplane.io/ labels and annotations stay as they were at creation
//     unless runplane's ServiceAccounts (or a cluster admin) change them:
//     removing runplane.io/egress, adding runplane.io/ssh or
//     ssh-service-type later, rewriting runplane.io/injected are denied;
//     so are a new image for a runplane-* container and removing the
//     storage gate.
//   - runplane-managed-by: only runplane's ServiceAccounts, the Kubernetes
//     controllers (kube-system, kube-controller-manager) and cluster admins
//     set app.kubernetes.io/managed-by=runplane-controller on a Pod or on a
//     workload's Pod template, or change an object that carries it; so the
//     webhook may trust it on a Pod the Job or ReplicaSet controller creates.
//   - runplane-nats-token: only the kubelet (group system:nodes), runplane's
//     ServiceAccounts and cluster admins request ServiceAccount tokens for
//     runplane's NATS audience (TokenRequest); a tenant who may create
//     tokens cannot mint a NATS identity for one of its Pods.
//   - runplane-namespace-tiers: only cluster admins (and
//     TierGrantorGroups) set or change a Namespace's
//     runplane.io/priority-tiers, on create as on update: a tenant allowed
//     to create or label its own Namespaces cannot grant itself a tier
//     that preempts other tenants' work.
//   - runplane-claim-templates: only runplane's ServiceAccounts, the
//     Kubernetes controllers and cluster admins create, change or delete a
//     ResourceClaimTemplate named runplane-* or labelled managed-by
//     runplane-controller: the templates GPU Pods of DRA specs claim from.
//   - runplane-gpu (optional): GPU requests, claims from runplane's
//     ResourceClaimTemplates and runplane's PriorityClasses only on Pods
//     runplane schedules (runplane.io/gpu-spec or /stock); no
//     container (ephemeral ones included, on pods/ephemeralcontainers)
//     sets a device variable of the NVIDIA container toolkit by any route.
//   - runplane-gpu-claims (with runplane-gpu): a ResourceClaim or
//     ResourceClaimTemplate whose device requests (exactly or
//     firstAvailable) name a GPU DeviceClass is created only by runplane,
//     cluster admins and kube-controller-manager's resource-claim
//     controller making a Pod's claim from its template (the template was
//     checked here when it was made): a tenant's own would give its Pods
//     GPUs through the default scheduler, outside the catalog, the ledger
//     and stock.
func Policies(o PolicyOptions) ([]*admissionregistrationv1.ValidatingAdmissionPolicy, []*admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	if o.Namespace == "" {
		o.Namespace = api.DefaultNamespace
	}
	excluded := append([]string{"kube-system", o.Namespace}, o.ExcludeNamespaces...)
	slices.Sort(excluded)
	excluded = slices.Compact(excluded)
	runplane := "request.userInfo.username.startsWith('" + serviceAccountPrefix + o.Namespace + ":')"
	admin := "'" + mastersGroup + "' in request.userInfo.groups"
	writtenLabels, writtenAnnotations := writtenPodKeys()
	kube := "request.userInfo.username.startsWith('" + kubeSystemAccountPrefix + "') || request.userInfo.username == '" + controllerManagerUser + "'"

	policies := []*admissionregistrationv1.ValidatingAdmissionPolicy{
		policy(api.PolicyPodKeys, podRules([]admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, "pods", "pods/status"),
			[]admissionregistrationv1.MatchCondition{{Name: "not-runplane", Expression: "!(" + runplane + " || " + admin + ")"}},
			[]admissionregistrationv1.Variable{
				{Name: "oldLabels", Expression: "oldObject.metadata.?labels.orValue({})"},
				{Name: "newLabels", Expression: "object.metadata.?labels.orValue({})"},
				{Name: "oldAnnotations", Expression: "oldObject.metadata.?annotations.orValue({})"},
				{Name: "newAnnotations", Expression: "object.metadata.?annotations.orValue({})"},
				{Name: "changed", Expression: changedKeys("label", "Labels") + " + " + changedKeys("annotation", "Annotations")},
				{Name: "unknown", Expression: "variables.newLabels.filter(k, k.startsWith('" + api.Prefix + "') && !(k in " + celList(PodLabels()) + ")).map(k, 'label ' + k) + " +
					"variables.newAnnotations.filter(k, k.startsWith('" + api.Prefix + "') && !(k in " + celList(PodAnnotations()) + ")).map(k, 'annotation ' + k)"},
				{Name: "written", Expression: "variables.newLabels.filter(k, k in " + celList(writtenLabels) + ").map(k, 'label ' + k) + " +
					"variables.newAnnotations.filter(k, k in " + celList(writtenAnnotations) + ").map(k, 'annotation ' + k)"},
				{Name: "changedImages", Expression: "(object.spec.?initContainers.orValue([]) + object.spec.?containers.orValue([])).filter(c, c.name.startsWith('" + api.ReservedPrefix + "') && " +
					"!(oldObject.spec.?initContainers.orValue([]) + oldObject.spec.?containers.orValue([])).exists(o, o.name == c.name && o.image == c.image)).map(c, c.name)"},
			},
			admissionregistrationv1.Validation{
				Expression: "request.operation != 'CREATE' || size(variables.unknown) == 0",
				MessageExpression: "'unknown runplane key(s) on a Pod: ' + variables.unknown.join(', ') + '; known labels: " + strings.Join(PodLabels(), ", ") +
					"; known annotations: " + strings.Join(PodAnnotations(), ", ") + "'",
				Reason: ptr.To(metav1.StatusReasonForbidden),
			},
			admissionregistrationv1.Validation{
				Expression:        "request.operation != 'CREATE' || size(variables.written) == 0",
				MessageExpression: "variables.written.join(', ') + ': written by runplane to report what it did; only runplane sets them'",
				Reason:            ptr.To(metav1.StatusReasonForbidden),
			},
			admissionregistrationv1.Validation{
				Expression: "request.operation != 'UPDATE' || size(variables.changed) == 0",
				MessageExpression: "'the " + api.Prefix + " labels and annotations of a Pod are fixed when it is created; only runplane changes them later (recreate the Pod instead); changed: ' + " +
					"variables.changed.join(', ')",
				Reason: ptr.To(metav1.StatusReasonForbidden),
			},
			admissionregistrationv1.Validation{
				Expression:        "request.operation != 'UPDATE' || size(variables.changedImages) == 0",
				MessageExpression: "'the containers runplane injects (" + api.ReservedPrefix + "*) keep their image; changed: ' + variables.changedImages.join(', ')",
				Reason:            ptr.To(metav1.StatusReasonForbidden),
			},
			admissionregistrationv1.Validation{
				Expression: "request.operation != 'UPDATE' || !oldObject.spec.?schedulingGates.orValue([]).exists(g, g.name == '" + api.SchedulingGateStorage + "') || " +
					"object.spec.?schedulingGates.orValue([]).exists(g, g.name == '" + api.SchedulingGateStorage + "')",
				Message: "scheduling gate " + api.SchedulingGateStorage + " is removed by runplane once the Pod's volumes are prepared, by nobody else",
				Reason:  ptr.To(metav1.StatusReasonForbidden),
			}),
		policy(api.PolicyManagedBy, workloadRules(),
			[]admissionregistrationv1.MatchCondition{{Name: "not-runplane-or-kubernetes", Expression: "!(" + runplane + " || " + kube + " || " + admin + ")"}},
			[]admissionregistrationv1.Variable{
				{Name: "newMarked", Expression: managedByMarked("object")},
				{Name: "oldMarked", Expression: "oldObject != null && (" + managedByMarked("oldObject") + ")"},
			},
			admissionregistrationv1.Validation{
				Expression: "!variables.newMarked && !variables.oldMarked",
				Message: "label " + api.LabelManagedBy + "=" + api.ManagedByController + " marks runplane's own objects (on the object or its Pod template): " +
					"only runplane sets it, and only runplane changes an object that carries it",
				Reason: ptr.To(metav1.StatusReasonForbidden),
			}),
		policy(api.PolicyNATSToken, []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"serviceaccounts/token"},
				Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
		}}},
			[]admissionregistrationv1.MatchCondition{{Name: "not-kubelet-or-runplane", Expression: "!(" + runplane + " || " + admin + " || '" + nodesGroup + "' in request.userInfo.groups)"}},
			nil,
			admissionregistrationv1.Validation{
				Expression: "!object.spec.?audiences.orValue([]).exists(a, a == '" + api.NATSTokenAudience + "')",
				Message:    "tokens for runplane's NATS audience " + api.NATSTokenAudience + " are minted only by the kubelet, for the projected volume of runplane's worker sidecar",
				Reason:     ptr.To(metav1.StatusReasonForbidden),
			}),
		namespaceTiersPolicy(admin, o.TierGrantorGroups),
		claimTemplatesPolicy(runplane, kube, admin),
	}
	if o.GPU != nil {
		policies = append(policies, gpuPolicy(o.GPU), gpuClaimsPolicy(o.GPU, runplane, admin))
	}
	bindings := make([]*admissionregistrationv1.ValidatingAdmissionPolicyBinding, len(policies))
	for i, p := range policies {
		match := &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: excluded,
			}}}}
		if p.Name == api.PolicyNamespaceTiers {
			// Every Namespace: for a Namespace the selector is matched
			// against the Namespace itself, so one created under an
			// excluded name could carry a grant.
			match = &admissionregistrationv1.MatchResources{}
		}
		bindings[i] = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName:        p.Name,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
				MatchResources:    match,
			},
		}
	}
	return policies, bindings
}

// deviceEnv are the variables through which the NVIDIA container toolkit
// gives a container devices the device plugin did not, each with the
// values that ask for none. It reads them from the container's final
// environment, wherever they came from. On a node that accepts
// NVIDIA_VISIBLE_DEVICES from unprivileged containers (the toolkit's
// default; SECURITY.md asks nodes to refuse it), NVIDIA_VISIBLE_DEVICES
// names devices, and CUDA_VERSION without NVIDIA_REQUIRE_CUDA marks a
// "legacy" image, which gets every GPU when NVIDIA_VISIBLE_DEVICES is
// unset. On any node, a container that has devices (a gpu-spec Pod's)
// gets IMEX channels (made on the host) by NVIDIA_IMEX_CHANNELS and the
// host's GDS, InfiniBand, NVSwitch and GDRCopy devices by NVIDIA_GDS,
// NVIDIA_MOFED, NVIDIA_NVSWITCH, NVIDIA_GDRCOPY = enabled. Not here:
// NVIDIA_DRIVER_CAPABILITIES and CUDA_VISIBLE_DEVICES only shape or
// narrow the devices a container has, and NVIDIA_MIG_CONFIG_DEVICES and
// NVIDIA_MIG_MONITOR_DEVICES are refused by the toolkit for unprivileged
// containers (Pod Security baseline keeps tenants unprivileged).
func deviceEnv() []deviceVar {
	off := []string{"", "disabled"} // the toolkit acts on "enabled" only
	return []deviceVar{
		{"NVIDIA_VISIBLE_DEVICES", []string{"", "void", "none"}},
		{"NVIDIA_IMEX_CHANNELS", []string{""}},
		{"CUDA_VERSION", []string{""}},
		{"NVIDIA_GDS", off}, {"NVIDIA_MOFED", off}, {"NVIDIA_NVSWITCH", off}, {"NVIDIA_GDRCOPY", off},
	}
}

// deviceVar is a device variable and the values that ask for no device.
type deviceVar struct {
	Name    string
	Allowed []string
}

func gpuPolicy(g *GPUPolicy) *admissionregistrationv1.ValidatingAdmissionPolicy {
	resources := slices.Compact(slices.Sorted(slices.Values(g.Resources)))
	tiers := slices.Compact(slices.Sorted(slices.Values(g.WorkloadPriorityClasses)))
	tiers = slices.DeleteFunc(tiers, func(s string) bool { return s == api.PriorityClassWorkload })
	isGPU := "r in variables.gpuResources || variables.gpuPrefixes.exists(p, r.startsWith(p)) || " +
		"variables.gpuDeviceClasses.exists(d, r == '" + resourcev1.ResourceDeviceClassPrefix + "' + d)"
	var names, allowed, allowedText []string
	for _, v := range deviceEnv() {
		names = append(names, v.Name)
		allowed = append(allowed, "'"+v.Name+"': "+celList(v.Allowed))
		values := slices.DeleteFunc(slices.Clone(v.Allowed), func(s string) bool { return s == "" })
		allowedText = append(allowedText, v.Name+" "+strings.Join(append(values, "empty"), ", "))
	}
	// A variable set in env is seen at admission: literal values that ask
	// for nothing are fine, valueFrom is not (its value is read at start).
	badVar := "e.name in variables.deviceEnvAllowed && (has(e.valueFrom) || !(e.?value.orValue('') in variables.deviceEnvAllowed[e.name]))"
	badEnv := "c.?env.orValue([]).exists(e, " + badVar + ")"
	badEnvItem := "'container ' + c.name + ' sets ' + c.env.filter(e, " + badVar + ").map(e, e.name + (has(e.valueFrom) ? ' through valueFrom' : '')).join(', ')"
	// envFrom's keys are not seen at admission, and may change after it:
	// a device variable it could produce (its prefix starts that name)
	// must be set in env too, which wins over envFrom.
	envFromCan := "variables.deviceEnvNames.filter(n, c.?envFrom.orValue([]).exists(f, n.startsWith(f.?prefix.orValue(''))) && !c.?env.orValue([]).exists(e, e.name == n))"
	badEnvFromItem := "'container ' + c.name + ' takes envFrom that can set ' + " + envFromCan + ".join(', ')"
	// On CREATE every container; on an update of pods/ephemeralcontainers
	// the ephemeral containers it adds (the others are as admitted).
	created := "(object.spec.?containers.orValue([]) + object.spec.?initContainers.orValue([])).filter(c, request.operation == 'CREATE')"
	added := "object.spec.?ephemeralContainers.orValue([]).filter(c, request.operation == 'CREATE' || !oldObject.spec.?ephemeralContainers.orValue([]).exists(o, o.name == c.name))"
	rules := []admissionregistrationv1.NamedRuleWithOperations{
		podRules([]admissionregistrationv1.OperationType{admissionregistrationv1.Create}, "pods")[0],
		podRules([]admissionregistrationv1.OperationType{admissionregistrationv1.Update}, "pods/ephemeralcontainers")[0],
	}
	return policy(api.PolicyGPU, rules, nil,
		[]admissionregistrationv1.Variable{
			{Name: "labels", Expression: "object.metadata.?labels.orValue({})"},
			{Name: "gpuSpec", Expression: "'" + api.LabelGPUSpec + "' in variables.labels"},
			{Name: "stock", Expression: "'" + api.LabelStock + "' in variables.labels"},
			{Name: "gpuResources", Expression: celList(resources)},
			{Name: "gpuPrefixes", Expression: celList(g.Prefixes)},
			{Name: "gpuDeviceClasses", Expression: celList(deviceClasses(g))},
			{Name: "containers", Expression: created},
			{Name: "ephemeralContainers", Expression: added},
			{Name: "gpuContainers", Expression: "variables.containers.filter(c, " +
				"c.?resources.?requests.orValue({}).exists(r, " + isGPU + ") || c.?resources.?limits.orValue({}).exists(r, " + isGPU + ")).map(c, c.name)"},
			{Name: "priorityClass", Expression: "object.spec.?priorityClassName.orValue('')"},
			// The NVIDIA container toolkit hands a container devices by
			// these variables, device plugin or not (deviceEnv).
			{Name: "deviceEnvAllowed", Expression: "{" + strings.Join(allowed, ", ") + "}"},
			{Name: "deviceEnvNames", Expression: celList(names)},
			{Name: "deviceEnv", Expression: "variables.containers.filter(c, " + badEnv + ").map(c, " + badEnvItem + ") + " +
				"variables.ephemeralContainers.filter(c, " + badEnv + ").map(c, " + badEnvItem + ")"},
			{Name: "deviceEnvFrom", Expression: "variables.containers.filter(c, size(" + envFromCan + ") > 0).map(c, " + badEnvFromItem + ") + " +
				"variables.ephemeralContainers.filter(c, size(" + envFromCan + ") > 0).map(c, " + badEnvFromItem + ")"},
		},
		admissionregistrationv1.Validation{
			Expression: "variables.gpuSpec || variables.stock || size(variables.gpuContainers) == 0",
			MessageExpression: "'container(s) ' + variables.gpuContainers.join(', ') + ' request GPUs (' + (variables.gpuResources + variables.gpuPrefixes.map(p, p + '*') + " +
				"variables.gpuDeviceClasses.map(d, '" + resourcev1.ResourceDeviceClassPrefix + "' + d)).join(', ') + " +
				"'): GPUs are only given through runplane; label the Pod " + api.LabelGPUSpec + "=<spec of the catalog> and remove the GPU request (runplane sets it)'",
			Reason: ptr.To(metav1.StatusReasonForbidden),
		},
		admissionregistrationv1.Validation{
			Expression: "size(variables.deviceEnv) == 0",
			MessageExpression: "variables.deviceEnv.join('; ') + ': the NVIDIA container toolkit gives a container devices by these variables whatever the device plugin gave it, " +
				"and devices are only given through runplane; remove them, or set them in value (not valueFrom) to one asking for none: " + strings.Join(allowedText, "; ") + "'",
			Reason: ptr.To(metav1.StatusReasonForbidden),
		},
		admissionregistrationv1.Validation{
			Expression: "size(variables.deviceEnvFrom) == 0",
			MessageExpression: "variables.deviceEnvFrom.join('; ') + ': the NVIDIA container toolkit gives a container devices by these variables, and the keys of an envFrom " +
				"ConfigMap or Secret are not seen at admission (and may change after it); give each envFrom a prefix none of them starts with (e.g. APP_), " +
				"or set each of them in env, which wins over envFrom, to a value asking for none: " + strings.Join(allowedText, "; ") + "'",
			Reason: ptr.To(metav1.StatusReasonForbidden),
		},
		admissionregistrationv1.Validation{
			// runplane-workload apart: the chart fills in the other tiers (hack/admgen).
			Expression: "request.operation != 'CREATE' || !(variables.priorityClass in " + celList([]string{api.PriorityClassWorkload}) + " + " + celList(tiers) + ") || variables.gpuSpec",
			MessageExpression: "'priorityClassName ' + variables.priorityClass + ' is a runplane workload tier: only Pods labelled " + api.LabelGPUSpec +
				" may use it (runplane checks the tier, or sets " + api.PriorityClassWorkload + ")'",
			Reason: ptr.To(metav1.StatusReasonForbidden),
		},
		admissionregistrationv1.Validation{
			Expression: "request.operation != 'CREATE' || variables.priorityClass != '" + api.PriorityClassStock + "' || variables.stock",
			Message:    "priorityClassName " + api.PriorityClassStock + " is runplane's: only stock placeholders labelled " + api.LabelStock + " get it (runplane sets it)",
			Reason:     ptr.To(metav1.StatusReasonForbidden),
		},
		// A DRA spec's template in the namespace (a GPU Pod's) would give
		// any Pod claiming from it GPUs outside runplane's scheduling.
		admissionregistrationv1.Validation{
			Expression: "request.operation != 'CREATE' || variables.gpuSpec || variables.stock || " +
				"!object.spec.?resourceClaims.orValue([]).exists(c, c.?resourceClaimTemplateName.orValue('').startsWith('" + catalog.ClaimTemplatePrefix + "'))",
			Message: "spec.resourceClaims names a ResourceClaimTemplate " + catalog.ClaimTemplatePrefix + "*, a DRA GPU spec's: GPUs are only given through runplane; label the Pod " +
				api.LabelGPUSpec + "=<spec of the catalog> and remove the claim (runplane sets it)",
			Reason: ptr.To(metav1.StatusReasonForbidden),
		})
}

// deviceClasses are g's DeviceClasses, sorted, each once.
func deviceClasses(g *GPUPolicy) []string {
	return slices.Compact(slices.Sorted(slices.Values(g.DeviceClasses)))
}

// gpuClaimsPolicy is runplane-gpu-claims. A claim's and a template's
// device requests are immutable, so an UPDATE is denied only when it adds
// a GPU class (an API that made them mutable); the finalizers and owners
// the scheduler and the garbage collector write stay admitted.
// kube-controller-manager's claims for a Pod (annotation
// resource.kubernetes.io/pod-claim-name, owned by the Pod) copy a template
// admitted here or runplane's own (runplane-claim-templates); the
// scheduler's claims for an extended resource of a class are made only
// for Pods runplane-gpu admitted.
func gpuClaimsPolicy(g *GPUPolicy, runplane, admin string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	// Only the controller that makes a Pod's claims from its template (its
	// own ServiceAccount, or kube-controller-manager's user without
	// per-controller credentials) — not every kube-system ServiceAccount,
	// where add-ons run too (review finding).
	kube := "request.userInfo.username == '" + kubeSystemAccountPrefix + resourceClaimControllerAccount +
		"' || request.userInfo.username == '" + controllerManagerUser + "'"
	// What the claim of a Pod's template carries (resource-claim
	// controller): the annotation, and the Pod as controlling owner.
	forPod := "object.metadata.?annotations[?'" + resourcev1.PodResourceClaimAnnotation + "'].orValue('') != '' && " +
		"object.metadata.?ownerReferences.orValue([]).exists(o, o.kind == 'Pod' && o.apiVersion == 'v1' && o.?controller.orValue(false))"
	// A claim's DeviceClaim is at spec, a template's at spec.spec: dyn()
	// lets the type checker pass the one the other kind lacks.
	spec := func(obj string) string {
		return "request.resource.resource == 'resourceclaims' ? dyn(" + obj + ".spec) : dyn(" + obj + ".spec).spec"
	}
	// named is CEL: the GPU classes the requests of variables.<which>
	// name, each as "<field> <class>" (one item per request).
	named := func(which string) string {
		reqs := "variables." + which + ".?devices.?requests.orValue([])"
		field := "variables.path + '.devices.requests[' + r.name + ']."
		return reqs + ".filter(r, r.?exactly.?deviceClassName.orValue('') in variables.gpuDeviceClasses)" +
			".map(r, " + field + "exactly.deviceClassName ' + r.exactly.deviceClassName) + " +
			reqs + ".filter(r, r.?firstAvailable.orValue([]).exists(s, s.deviceClassName in variables.gpuDeviceClasses))" +
			".map(r, r.firstAvailable.filter(s, s.deviceClassName in variables.gpuDeviceClasses)" +
			".map(s, " + field + "firstAvailable[' + s.name + '].deviceClassName ' + s.deviceClassName).join(', '))"
	}
	rule := admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		// v1 with MatchPolicy Equivalent: requests in any served version
		// are checked in v1's shape (exactly, firstAvailable).
		Rule: admissionregistrationv1.Rule{APIGroups: []string{resourcev1.GroupName}, APIVersions: []string{"v1"},
			Resources: []string{"resourceclaims", "resourceclaimtemplates"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}}
	return policy(api.PolicyGPUClaims, []admissionregistrationv1.NamedRuleWithOperations{rule},
		[]admissionregistrationv1.MatchCondition{{Name: "not-runplane-or-pod-claim",
			Expression: "!(" + runplane + " || " + admin + " || ((" + kube + ") && " + forPod + "))"}},
		[]admissionregistrationv1.Variable{
			{Name: "gpuDeviceClasses", Expression: celList(deviceClasses(g))},
			{Name: "path", Expression: "request.resource.resource == 'resourceclaims' ? 'spec' : 'spec.spec'"},
			{Name: "claim", Expression: spec("object")},
			{Name: "oldClaim", Expression: "oldObject == null ? dyn({}) : (" + spec("oldObject") + ")"},
			{Name: "gpus", Expression: named("claim")},
			{Name: "oldGPUs", Expression: named("oldClaim")},
			{Name: "added", Expression: "variables.gpus.filter(x, !(x in variables.oldGPUs))"},
		},
		admissionregistrationv1.Validation{
			Expression: "size(variables.added) == 0",
			MessageExpression: "variables.added.join('; ') + ': GPUs (DeviceClasses ' + variables.gpuDeviceClasses.join(', ') + ') are only given through runplane, " +
				"not by a claim or template of your own; label the Pod " + api.LabelGPUSpec + "=<spec of the catalog> and remove the claim " +
				"(for a DRA spec runplane gives the Pod a claim of its template " + catalog.ClaimTemplatePrefix + "<spec>)'",
			Reason: ptr.To(metav1.StatusReasonForbidden),
		})
}

// namespaceTiersPolicy is runplane-namespace-tiers: the webhook admits a
// tier above runplane-workload only in a Namespace whose annotation names
// it, so the annotation is as strong as whoever may write it.
func namespaceTiersPolicy(admin string, grantorGroups []string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	// The groups are one CEL list, empty or not, so the chart fills in
	// its value in one place (hack/admgen).
	groups := celList(grantorGroups)
	tiers := "metadata.?annotations[?'" + api.AnnotationPriorityTiers + "'].orValue('')"
	return policy(api.PolicyNamespaceTiers, []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		// The status and finalize subresources write metadata too.
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"namespaces", "namespaces/status", "namespaces/finalize"},
			Scope: ptr.To(admissionregistrationv1.ClusterScope)},
	}}},
		[]admissionregistrationv1.MatchCondition{{Name: "not-grantor", Expression: "!(" + admin + " || request.userInfo.groups.exists(g, g in " + groups + "))"}},
		[]admissionregistrationv1.Variable{{Name: "grantors", Expression: groups}},
		admissionregistrationv1.Validation{
			Expression: "object." + tiers + " == (request.operation == 'CREATE' ? '' : oldObject." + tiers + ")",
			MessageExpression: "'annotation " + api.AnnotationPriorityTiers + " grants a Namespace\\'s GPU Pods priority tiers that preempt other tenants\\' work: " +
				"only cluster admins' + (size(variables.grantors) > 0 ? ' and the groups ' + variables.grantors.join(', ') : '') + ' set or change it'",
			Reason: ptr.To(metav1.StatusReasonForbidden),
		})
}

// claimTemplatesPolicy keeps the ResourceClaimTemplates of DRA GPU specs
// runplane's: a GPU Pod of spec S claims its devices from runplane-S in its
// own namespace, so a template a tenant made (or changed) under that name
// would give its Pods other devices than the spec's, e.g. eight GPUs for a
// one-GPU spec. Neither the name nor the managed-by label may be created,
// changed or deleted by anyone but runplane, the Kubernetes controllers
// (namespace deletion, garbage collection) and cluster admins.
func claimTemplatesPolicy(runplane, kube, admin string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	ours := func(obj string) string {
		return obj + ".metadata.name.startsWith('" + catalog.ClaimTemplatePrefix + "') || " +
			obj + ".metadata.?labels[?'" + api.LabelManagedBy + "'].orValue('') == '" + api.ManagedByController + "'"
	}
	return policy(api.PolicyClaimTemplates, []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"resourceclaimtemplates"},
			Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}}},
		[]admissionregistrationv1.MatchCondition{{Name: "not-runplane-or-kubernetes", Expression: "!(" + runplane + " || " + kube + " || " + admin + ")"}},
		nil,
		admissionregistrationv1.Validation{
			Expression: "!(request.operation != 'DELETE' && (" + ours("object") + ")) && !(request.operation != 'CREATE' && (" + ours("oldObject") + "))",
			Message: "ResourceClaimTemplates named " + catalog.ClaimTemplatePrefix + "* or labelled " + api.LabelManagedBy + "=" + api.ManagedByController +
				" are runplane's (GPU Pods of DRA specs claim their devices from them): only runplane creates, changes or deletes them; name yours otherwise",
			Reason: ptr.To(metav1.StatusReasonForbidden),
		})
}

func policy(name string, rules []admissionregistrationv1.NamedRuleWithOperations, conds []admissionregistrationv1.MatchCondition,
	vars []admissionregistrationv1.Variable, validations ...admissionregistrationv1.Validation) *admissionregistrationv1.ValidatingAdmissionPolicy {
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: rules, MatchPolicy: ptr.To(admissionregistrationv1.Equivalent)},
			MatchConditions:  conds,
			Variables:        vars,
			Validations:      validations,
		},
	}
}

func podRules(ops []admissionregistrationv1.OperationType, resources ...string) []admissionregistrationv1.NamedRuleWithOperations {
	return []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
		Operations: ops,
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: resources,
			Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}}}
}

// workloadRules are Pods and every built-in kind the Kubernetes
// controllers derive Pods from.
func workloadRules() []admissionregistrationv1.NamedRuleWithOperations {
	ops := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	rule := func(group string, resources ...string) admissionregistrationv1.NamedRuleWithOperations {
		return admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: ops,
			Rule: admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: resources,
				Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
		}}
	}
	return []admissionregistrationv1.NamedRuleWithOperations{
		rule("", "pods", "replicationcontrollers", "podtemplates"),
		rule("apps", "deployments", "replicasets", "statefulsets", "daemonsets"),
		rule("batch", "jobs", "cronjobs"),
	}
}

// managedByMarked is CEL: obj, or its Pod template, carries runplane's
// managed-by label.
func managedByMarked(obj string) string {
	label := "[?'" + api.LabelManagedBy + "'].orValue('') == '" + api.ManagedByController + "'"
	return obj + ".metadata.?labels" + label + " || " +
		obj + ".?template.?metadata.?labels" + label + " || " +
		obj + ".?spec.?template.?metadata.?labels" + label + " || " +
		obj + ".?spec.?jobTemplate.?spec.?template.?metadata.?labels" + label
}

// changedKeys is CEL: the runplane.io/ keys of variables.new<Kind> and
// variables.old<Kind> that differ, each as "<what> <key>".
func changedKeys(what, kind string) string {
	n, o := "variables.new"+kind, "variables.old"+kind
	p := "'" + api.Prefix + "'"
	return "(" + n + ".filter(k, k.startsWith(" + p + ") && (!(k in " + o + ") || " + o + "[k] != " + n + "[k])) + " +
		o + ".filter(k, k.startsWith(" + p + ") && !(k in " + n + "))).map(k, '" + what + " ' + k)"
}

func celList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}
