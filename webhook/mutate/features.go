package mutate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/pvcspec"
)

// Injected objects carry every field the API server would default, so a
// reinvocation (which sees the defaulted Pod) computes the same objects and
// an empty patch.
const (
	terminationMessagePath = "/dev/termination-log"
	secretDefaultMode      = int32(0o644)
	sidecarPortName        = "runplane-http"
)

func (m *Mutator) applyStock(ctx context.Context, pod *corev1.Pod, spec catalog.Spec) error {
	if err := setScheduler(pod, api.LabelStock); err != nil {
		return err
	}
	if err := placeOnSpec(pod, api.LabelStock, spec); err != nil {
		return err
	}
	res := spec.Resources()
	// A placeholder only holds capacity: whatever the template runs is
	// replaced by one pause container holding the full spec.
	pause := m.container(PauseContainerName, m.Config.PauseImage)
	pause.Resources = corev1.ResourceRequirements{Requests: res, Limits: spec.Resources()}
	pause.SecurityContext = pauseSecurityContext()
	pod.Spec.InitContainers = nil
	pod.Spec.Containers = []corev1.Container{pause}
	pod.Spec.Volumes = nil
	// A DRA spec's placeholder holds the devices of its own claim, and
	// no other claim the template may have named.
	pod.Spec.ResourceClaims = nil
	if spec.IsDRA() {
		if err := claimDevices(pod, api.LabelStock, spec); err != nil {
			return err
		}
	}
	pod.Spec.AutomountServiceAccountToken = ptr.To(false)
	pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(0))
	return m.setPriorityClass(ctx, pod, api.LabelStock, api.PriorityClassStock)
}

func (m *Mutator) applyGPU(ctx context.Context, pod *corev1.Pod, spec catalog.Spec, namespace string) error {
	main, err := mainContainer(pod)
	if err != nil {
		return err
	}
	if err := noDeviceClassRequests(pod, spec); err != nil {
		return err
	}
	if spec.IsDRA() {
		if err := noGPURequests(pod, spec); err != nil {
			return err
		}
		if err := claimDevices(pod, api.LabelGPUSpec, spec); err != nil {
			return err
		}
	}
	want := *resource.NewQuantity(spec.GPU, resource.DecimalSI)
	check := func(c *corev1.Container, isMain bool) error {
		for _, list := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
			q, ok := list[spec.GPUResource]
			if !ok {
				continue
			}
			if isMain && q.Cmp(want) != 0 {
				return &ConflictError{Label: api.LabelGPUSpec, Field: fmt.Sprintf("container %s resource %s", Quote(c.Name), spec.GPUResource),
					Reason: fmt.Sprintf("the container asks for %s but GPU spec %q gives %d; remove the GPU request (runplane sets it) or choose a spec with that many GPUs", q.String(), spec.Name, spec.GPU)}
			}
			if !isMain && !q.IsZero() {
				return &ConflictError{Label: api.LabelGPUSpec, Field: fmt.Sprintf("container %s resource %s", Quote(c.Name), spec.GPUResource),
					Reason: fmt.Sprintf("only the main container %s gets the GPUs of spec %q; remove the GPU request from %s", Quote(pod.Spec.Containers[main].Name), spec.Name, Quote(c.Name))}
			}
		}
		return nil
	}
	for i := range pod.Spec.Containers {
		if err := check(&pod.Spec.Containers[i], i == main); err != nil {
			return err
		}
	}
	for i := range pod.Spec.InitContainers {
		if err := check(&pod.Spec.InitContainers[i], false); err != nil {
			return err
		}
	}
	c := &pod.Spec.Containers[main]
	if c.Resources.Requests == nil {
		c.Resources.Requests = corev1.ResourceList{}
	}
	if c.Resources.Limits == nil {
		c.Resources.Limits = corev1.ResourceList{}
	}
	for name, q := range spec.Resources() {
		c.Resources.Requests[name] = q
		c.Resources.Limits[name] = q.DeepCopy()
	}
	if err := setScheduler(pod, api.LabelGPUSpec); err != nil {
		return err
	}
	if err := placeOnSpec(pod, api.LabelGPUSpec, spec); err != nil {
		return err
	}
	return m.setWorkloadPriority(ctx, pod, namespace)
}

// setWorkloadPriority gives a GPU Pod the priority tier it names, when the
// platform allows that tier, or runplane-workload when it names none. A
// tier outside the set, or one at or below runplane-stock (a workload that
// placeholders could never give way to), is denied with the allowed names;
// so is a tier above runplane-workload (one that preempts other tenants'
// work) that the Pod's Namespace is not granted (api.AnnotationPriorityTiers).
func (m *Mutator) setWorkloadPriority(ctx context.Context, pod *corev1.Pod, namespace string) error {
	allowed := m.Config.AllowedWorkloadPriorityClasses()
	name := cmp.Or(pod.Spec.PriorityClassName, api.PriorityClassWorkload)
	deny := func(format string, args ...any) error {
		return &ConflictError{Label: api.LabelGPUSpec, Field: "spec.priorityClassName", Reason: fmt.Sprintf(format, args...)}
	}
	if !slices.Contains(allowed, name) {
		return deny("is %s, which GPU Pods may not use; allowed: %s (default %s)", Quote(name), strings.Join(allowed, ", "), api.PriorityClassWorkload)
	}
	if name == api.PriorityClassWorkload {
		return m.setPriorityClass(ctx, pod, api.LabelGPUSpec, name)
	}
	classes := map[string]*schedulingv1.PriorityClass{}
	for _, n := range []string{name, api.PriorityClassStock, api.PriorityClassWorkload} {
		pc, err := m.PriorityClasses.GetPriorityClass(ctx, n)
		if err != nil {
			return fmt.Errorf("label %s: reading PriorityClass %s: %w", api.LabelGPUSpec, n, err)
		}
		if pc == nil {
			return fmt.Errorf("label %s: PriorityClass %s does not exist: runplane's chart creates it", api.LabelGPUSpec, n)
		}
		classes[n] = pc
	}
	tier, stock, workload := classes[name], classes[api.PriorityClassStock], classes[api.PriorityClassWorkload]
	if tier.Value <= stock.Value {
		return deny("is %s, whose value %d is at or below %s (%d): placeholders could never give way to it; allowed: %s",
			Quote(name), tier.Value, api.PriorityClassStock, stock.Value, strings.Join(allowed, ", "))
	}
	if tier.Value > workload.Value {
		granted, err := m.grantedTiers(ctx, namespace)
		if err != nil {
			return err
		}
		if !slices.Contains(granted, name) {
			return deny("is %s, a tier above %s that preempts other workloads: namespace %s is not granted it (its annotation %s lists %s)",
				Quote(name), api.PriorityClassWorkload, Quote(namespace), api.AnnotationPriorityTiers, Quote(strings.Join(granted, ",")))
		}
	}
	return m.setPriorityClass(ctx, pod, api.LabelGPUSpec, name)
}

// grantedTiers are the tiers above runplane-workload the namespace's Pods
// may name: its annotation api.AnnotationPriorityTiers, comma-separated.
func (m *Mutator) grantedTiers(ctx context.Context, namespace string) ([]string, error) {
	if m.Namespaces == nil {
		return nil, nil
	}
	ns, err := m.Namespaces.GetNamespace(ctx, namespace)
	if err != nil {
		return nil, fmt.Errorf("label %s: reading namespace %s: %w", api.LabelGPUSpec, namespace, err)
	}
	if ns == nil || ns.Annotations[api.AnnotationPriorityTiers] == "" {
		return nil, nil
	}
	var out []string
	for _, t := range strings.Split(ns.Annotations[api.AnnotationPriorityTiers], ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out, nil
}

// mainContainer is the container that gets a spec's resources: the one the
// kubectl default-container annotation names, else the first.
func mainContainer(pod *corev1.Pod) (int, error) {
	if len(pod.Spec.Containers) == 0 {
		return 0, &ConflictError{Label: api.LabelGPUSpec, Field: "spec.containers", Reason: "the Pod has no container"}
	}
	name, ok := pod.Annotations[DefaultContainerAnnotation]
	if !ok {
		return 0, nil
	}
	for i, c := range pod.Spec.Containers {
		if c.Name == name {
			return i, nil
		}
	}
	names := make([]string, len(pod.Spec.Containers))
	for i, c := range pod.Spec.Containers {
		names[i] = c.Name
	}
	return 0, invalidAnnotation(DefaultContainerAnnotation, "names container %s, which the Pod does not have; containers: %s", Quote(name), Quote(strings.Join(names, ", ")))
}

func setScheduler(pod *corev1.Pod, label string) error {
	if pod.Spec.NodeName != "" {
		return &ConflictError{Label: label, Field: "spec.nodeName",
			Reason: fmt.Sprintf("is %s, but runplane Pods are placed by %q; remove nodeName", Quote(pod.Spec.NodeName), api.SchedulerName)}
	}
	switch pod.Spec.SchedulerName {
	case "", corev1.DefaultSchedulerName, api.SchedulerName:
		pod.Spec.SchedulerName = api.SchedulerName
		return nil
	}
	return &ConflictError{Label: label, Field: "spec.schedulerName",
		Reason: fmt.Sprintf("is %s, but runplane Pods are scheduled by %q; remove schedulerName", Quote(pod.Spec.SchedulerName), api.SchedulerName)}
}

// placeOnSpec adds the spec's node selector and tolerations.
func placeOnSpec(pod *corev1.Pod, label string, spec catalog.Spec) error {
	for _, k := range sortedKeys(spec.NodeSelector) {
		v := spec.NodeSelector[k]
		if have, ok := pod.Spec.NodeSelector[k]; ok && have != v {
			return &ConflictError{Label: label, Field: "spec.nodeSelector[" + k + "]",
				Reason: fmt.Sprintf("is %s, but GPU spec %q needs %q; remove it", Quote(have), spec.Name, v)}
		}
		if pod.Spec.NodeSelector == nil {
			pod.Spec.NodeSelector = map[string]string{}
		}
		pod.Spec.NodeSelector[k] = v
	}
	for _, t := range spec.Tolerations {
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(have corev1.Toleration) bool { return equality.Semantic.DeepEqual(have, t) }) {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, t)
		}
	}
	if spec.NVLink {
		requireNVLinkDomain(pod, spec.GPU)
	}
	return nil
}

// requireNVLinkDomain keeps the Pod to nodes whose largest NVLink domain
// holds all its GPUs: the requirement is added to every required node
// affinity term (terms are ORed, so each must carry it), or forms the only
// term. Idempotent, for reinvocation.
func requireNVLinkDomain(pod *corev1.Pod, gpus int64) {
	req := corev1.NodeSelectorRequirement{Key: api.LabelNVLinkDomainGPUs, Operator: corev1.NodeSelectorOpGt, Values: []string{strconv.FormatInt(gpus-1, 10)}}
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	terms := &na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(*terms) == 0 {
		*terms = append(*terms, corev1.NodeSelectorTerm{})
	}
	for i := range *terms {
		t := &(*terms)[i]
		if !slices.ContainsFunc(t.MatchExpressions, func(have corev1.NodeSelectorRequirement) bool { return equality.Semantic.DeepEqual(have, req) }) {
			t.MatchExpressions = append(t.MatchExpressions, req)
		}
	}
}

// setPriorityClass sets the class and also its value and preemption policy:
// the Priority admission plugin resolved them before this webhook ran, and
// recomputes (and insists on) them if the chain is reinvoked.
func (m *Mutator) setPriorityClass(ctx context.Context, pod *corev1.Pod, label, name string) error {
	pc, err := m.PriorityClasses.GetPriorityClass(ctx, name)
	if err != nil {
		return fmt.Errorf("label %s: reading PriorityClass %s: %w", label, name, err)
	}
	if pc == nil {
		return fmt.Errorf("label %s: PriorityClass %s does not exist: runplane's chart creates it", label, name)
	}
	pod.Spec.PriorityClassName = name
	pod.Spec.Priority = ptr.To(pc.Value)
	policy := corev1.PreemptLowerPriority
	if pc.PreemptionPolicy != nil {
		policy = *pc.PreemptionPolicy
	}
	pod.Spec.PreemptionPolicy = &policy
	return nil
}

func (m *Mutator) applyPool(pod *corev1.Pod, o Options) error {
	if pod.Labels[api.LabelEgress] != api.EgressRestricted {
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		pod.Labels[api.LabelEgress] = api.EgressRestricted
	}
	// In one process namespace every container could read the sidecar's
	// NATS token through /proc/<pid>/root.
	if ptr.Deref(pod.Spec.ShareProcessNamespace, false) {
		return &ConflictError{Label: api.LabelPool, Field: "spec.shareProcessNamespace",
			Reason: "must not be true: the worker sidecar's NATS identity would be readable from every container; remove it"}
	}
	// A Pod on the node's network is outside every egress policy
	// (AdminNetworkPolicy and NetworkPolicy select Pod networks only).
	if pod.Spec.HostNetwork {
		return &ConflictError{Label: api.LabelPool, Field: "spec.hostNetwork",
			Reason: "must not be true on a pool Pod: its egress is restricted, and no network policy covers the node's network"}
	}
	if err := checkPoolResolution(pod); err != nil {
		return err
	}
	var err error
	socketDir := path.Dir(o.Framework.Socket)
	upsertVolume(pod, corev1.Volume{Name: VolumeFrameworkSocket, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	// The sidecar's NATS credential: a token of the Pod's ServiceAccount,
	// bound to this Pod, for the NATS audience only, rotated by the kubelet.
	// runplane's auth callout turns it into a NATS user allowed exactly this
	// worker's subjects; no Secret is involved.
	upsertVolume(pod, corev1.Volume{Name: VolumeNATSCredentials, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: api.NATSTokenAudience, ExpirationSeconds: ptr.To[int64](api.NATSTokenExpirationSeconds), Path: api.NATSTokenPath}}},
		DefaultMode: ptr.To(secretDefaultMode)}}})

	contract := frameworkEnv(o)
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if err := upsertMount(c, corev1.VolumeMount{Name: VolumeFrameworkSocket, MountPath: socketDir}, api.AnnotationFrameworkSocket); err != nil {
			return err
		}
		upsertEnv(c, contract)
	}

	probe := func(p string, period, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: p, Port: intstr.FromString(sidecarPortName), Scheme: corev1.URISchemeHTTP}},
			TimeoutSeconds: 1, PeriodSeconds: period, SuccessThreshold: 1, FailureThreshold: failures,
		}
	}
	// A rollout or drain lets running invocations finish: the grace period
	// covers the pool's longest execution and a margin, unless the user set
	// one (the API server has defaulted an unset one to 30 before admission:
	// 30 counts as unset).
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g == corev1.DefaultTerminationGracePeriodSeconds {
		pod.Spec.TerminationGracePeriodSeconds = ptr.To(int64(o.Execution.TimeoutSeconds + api.TerminationMarginSeconds))
	}
	shutdownGrace := max(*pod.Spec.TerminationGracePeriodSeconds-api.ShutdownMarginSeconds, 1)
	sc := m.container(api.SidecarContainerName, m.Config.Image)
	sc.Command = []string{SidecarCommand}
	sc.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	sc.Ports = []corev1.ContainerPort{{Name: sidecarPortName, ContainerPort: api.SidecarHTTPPort, Protocol: corev1.ProtocolTCP}}
	sc.Env = append(contract,
		corev1.EnvVar{Name: api.EnvConcurrency, Value: strconv.Itoa(o.Concurrency)},
		corev1.EnvVar{Name: api.EnvNATSURL, Value: m.Config.NATSURL},
		corev1.EnvVar{Name: api.EnvSubjectPrefix, Value: m.Config.SubjectPrefix},
		corev1.EnvVar{Name: api.EnvStreamName, Value: m.Config.StreamName},
		corev1.EnvVar{Name: api.EnvNATSTokenFile, Value: api.NATSTokenFile},
		corev1.EnvVar{Name: api.EnvNATSJSAPIPrefix, Value: api.WorkerJSAPIPrefix},
		corev1.EnvVar{Name: api.EnvSidecarHTTPAddr, Value: ":" + strconv.Itoa(api.SidecarHTTPPort)},
		corev1.EnvVar{Name: api.EnvShutdownGraceSeconds, Value: strconv.FormatInt(shutdownGrace, 10)},
		corev1.EnvVar{Name: api.EnvWorkerStateDir, Value: api.WorkerStateDir},
	)
	// The sidecar sends its token only to a server that proves runplane's
	// NATS CA and this name, through TLS begun before anything else.
	if m.Config.NATSServerName != "" {
		if m.NATSCA == nil {
			return errors.New("injection config: a NATS server name without a CA source")
		}
		ca, err := m.NATSCA()
		if err != nil {
			return fmt.Errorf("the worker sidecar's NATS CA: %w", err)
		}
		sc.Env = append(sc.Env,
			corev1.EnvVar{Name: api.EnvNATSServerName, Value: m.Config.NATSServerName},
			corev1.EnvVar{Name: api.EnvNATSCA, Value: string(ca)})
	}
	// The sidecar's own: the framework's outcomes until their results are
	// stored, across a restart of the sidecar container.
	upsertVolume(pod, corev1.Volume{Name: VolumeWorkerState, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	sc.VolumeMounts = []corev1.VolumeMount{
		{Name: VolumeFrameworkSocket, MountPath: socketDir},
		{Name: VolumeNATSCredentials, MountPath: api.NATSCredentialsMountDir, ReadOnly: true},
		{Name: VolumeWorkerState, MountPath: api.WorkerStateDir},
	}
	// Startup only needs the sidecar itself (/livez): the main containers
	// start after it, so waiting for the framework here would deadlock.
	// Readiness reports the framework's health, so the Pod is Ready only
	// when it can serve.
	sc.StartupProbe = probe("/livez", 1, 60)
	sc.ReadinessProbe = probe("/readyz", 2, 3)
	sc.LivenessProbe = probe("/livez", 10, 3)
	// Pod Security restricted, as its own user: the kubelet then gives the
	// projected token to that user alone (mode 0600), and the framework
	// socket is world-writable by contract (framework.Serve).
	sc.SecurityContext = restrictedSecurityContext()
	if sc.Resources, err = m.sidecarResources(api.SidecarContainerName, o.WorkerResources, api.AnnotationWorkerResources); err != nil {
		return err
	}
	upsertSidecar(pod, sc)
	return nil
}

// checkPoolResolution keeps a pool Pod's name resolution the cluster's.
// The worker sidecar dials NATS by name and presents its Pod-bound token
// there; /etc/hosts and the resolver configuration are the Pod's, shared
// by the sidecar, so an entry or a nameserver of the tenant's choosing
// would send that token to the tenant's own server. No host alias at all
// rather than none naming NATS: /etc/hosts matches names case-insensitively,
// with or without a trailing dot, against every name the sidecar may ever
// resolve (an external NATS's too), which a list of names cannot pin down.
// Search domains go too: the NATS name has fewer dots than the cluster's
// ndots, so the resolver tries it under every search domain (the Pod's are
// appended to the cluster's) before it tries it as it is.
func checkPoolResolution(pod *corev1.Pod) error {
	deny := func(field, reason string) error {
		return &ConflictError{Label: api.LabelPool, Field: field, Reason: reason}
	}
	if len(pod.Spec.HostAliases) > 0 {
		return deny("spec.hostAliases", "must be empty on a pool Pod: the worker sidecar dials runplane's NATS by name from the same /etc/hosts, "+
			"and an alias would send its credential elsewhere; remove hostAliases (publish the names through cluster DNS instead)")
	}
	if pod.Spec.DNSPolicy == corev1.DNSNone {
		return deny("spec.dnsPolicy", fmt.Sprintf("is %q; allowed on a pool Pod: %s (the default), %s, %s: the worker sidecar resolves runplane's NATS with the Pod's resolver",
			corev1.DNSNone, corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault))
	}
	if dc := pod.Spec.DNSConfig; dc != nil {
		if len(dc.Nameservers) > 0 {
			return deny("spec.dnsConfig.nameservers", "must be empty on a pool Pod: the worker sidecar resolves runplane's NATS with the Pod's resolver; "+
				"remove them (dnsConfig.options are allowed)")
		}
		if len(dc.Searches) > 0 {
			return deny("spec.dnsConfig.searches", "must be empty on a pool Pod: runplane's NATS name would be tried under them before the cluster answers; "+
				"remove them (dnsConfig.options are allowed)")
		}
	}
	return nil
}

// frameworkEnv is the framework contract every main container gets, under
// runplane's names and the seed's SERVERLESS_* names.
func frameworkEnv(o Options) []corev1.EnvVar {
	field := func(name, p string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: p}}}
	}
	val := func(name, v string) corev1.EnvVar { return corev1.EnvVar{Name: name, Value: v} }
	return []corev1.EnvVar{
		val(api.EnvPool, o.Pool),
		field(api.EnvWorkerName, "metadata.name"),
		field(api.EnvWorkerNamespace, "metadata.namespace"),
		val(api.EnvFrameworkSocket, o.Framework.Socket),
		val(api.EnvFrameworkInvokePath, o.Framework.InvokePath),
		val(api.EnvFrameworkHealthPath, o.Framework.HealthPath),
		val(api.EnvSeedRequestID, o.Pool),
		field(api.EnvSeedWorkerName, "metadata.name"),
		field(api.EnvSeedWorkerNamespace, "metadata.namespace"),
		val(api.EnvSeedSocketPath, o.Framework.Socket),
		val(api.EnvSeedInvokePath, o.Framework.InvokePath),
		val(api.EnvSeedHealthPath, o.Framework.HealthPath),
	}
}

// applySSH runs runplane's SSH server inside the main container, so a
// session has exactly its GPUs, environment, mounts and cgroup limits: the
// launcher (runplane-ssh --launch) goes in front of the container's
// command and starts both (sidecar/sshserver/launcher). The static binary
// comes from runplane's image, copied into an emptyDir by an init
// container; the main container's securityContext is left as it is.
func (m *Mutator) applySSH(pod *corev1.Pod, o Options) error {
	upsertVolume(pod, corev1.Volume{Name: VolumeSSHAuthorizedKey, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName:  o.SSHSecret,
		Items:       []corev1.KeyToPath{{Key: api.SSHAuthorizedKeysKey, Path: api.SSHAuthorizedKeysKey}},
		DefaultMode: ptr.To(secretDefaultMode),
	}}})
	// An emptyDir outlives container restarts, so the host key the server
	// generates on first start stays the same for the Pod's life.
	upsertVolume(pod, corev1.Volume{Name: VolumeSSHHostKey, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	upsertVolume(pod, corev1.Volume{Name: VolumeSSHBinary, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	mainIdx, err := mainContainer(pod)
	if err != nil {
		return err
	}
	binary := path.Join(SSHBinaryDir, SSHCommand)
	install := m.container(SSHInstallContainerName, m.Config.Image)
	install.Command = []string{SSHCommand, "--install-to", binary}
	install.VolumeMounts = []corev1.VolumeMount{{Name: VolumeSSHBinary, MountPath: SSHBinaryDir}}
	install.SecurityContext = restrictedSecurityContext()
	if install.Resources, err = m.sidecarResources(SSHInstallContainerName, nil, ""); err != nil {
		return err
	}
	upsertSidecar(pod, install)

	c := &pod.Spec.Containers[mainIdx]
	// Kubernetes runs command+args, or the image's ENTRYPOINT when command
	// is empty; the webhook cannot read image configs, so it cannot put the
	// launcher in front of an ENTRYPOINT it does not know.
	if len(c.Command) == 0 {
		return &ConflictError{Label: api.LabelSSH, Field: fmt.Sprintf("container %s command", Quote(c.Name)),
			Reason: "is not set: SSH runs inside the main container, started in front of its command, and the webhook cannot read the image's ENTRYPOINT; " +
				`set command (and args) to what the container runs, e.g. the image's ENTRYPOINT, or command: ["sleep", "infinity"] for a dev box`}
	}
	for _, vm := range sshMounts() {
		for _, have := range c.VolumeMounts {
			if have.Name != vm.Name && path.Clean(have.MountPath) == vm.MountPath {
				return &ConflictError{Label: api.LabelSSH, Field: fmt.Sprintf("container %s volume mount %s", Quote(c.Name), Quote(have.Name)),
					Reason: fmt.Sprintf("is at %s, where runplane mounts the SSH server's %s; mount it elsewhere", vm.MountPath, vm.Name)}
			}
		}
		c.VolumeMounts = append(c.VolumeMounts, vm)
	}
	c.Command = append(sshLauncher(), c.Command...)
	return nil
}

// sshLauncher is what goes in front of the main container's command. The
// server runs as the container's user, root included (--allow-root): the
// Pod's owner chose that user for the container, and the namespace's Pod
// Security bounds it (restricted forbids root).
func sshLauncher() []string {
	return []string{path.Join(SSHBinaryDir, SSHCommand), "--launch", "--allow-root",
		"--listen", ":" + strconv.Itoa(api.SSHPort),
		"--authorized-keys", path.Join(api.SSHAuthorizedKeysDir, api.SSHAuthorizedKeysKey),
		"--host-key", path.Join(api.SSHHostKeyDir, "host_key"),
		"--",
	}
}

// sshMounts are the mounts the main container of an SSH Pod gets.
func sshMounts() []corev1.VolumeMount {
	return []corev1.VolumeMount{
		{Name: VolumeSSHAuthorizedKey, MountPath: api.SSHAuthorizedKeysDir, ReadOnly: true},
		{Name: VolumeSSHHostKey, MountPath: api.SSHHostKeyDir},
		{Name: VolumeSSHBinary, MountPath: SSHBinaryDir, ReadOnly: true},
	}
}

// unwrapSSH undoes applySSH on the main container of a Pod that already
// carries it (a reinvocation): the launcher prefix and runplane's mounts
// go, when they are exactly runplane's, so the checks of user containers
// and the new injection see the user's container.
func unwrapSSH(pod *corev1.Pod) {
	i, err := mainContainer(pod)
	if err != nil {
		return // applySSH reports it
	}
	c := &pod.Spec.Containers[i]
	if prefix := sshLauncher(); len(c.Command) > len(prefix) && slices.Equal(c.Command[:len(prefix)], prefix) {
		c.Command = slices.Clone(c.Command[len(prefix):])
	}
	ours := sshMounts()
	c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
		return slices.ContainsFunc(ours, func(o corev1.VolumeMount) bool { return equality.Semantic.DeepEqual(o, vm) })
	})
	if len(c.VolumeMounts) == 0 {
		c.VolumeMounts = nil
	}
}

// applyStorageGate adds the scheduling gate when a mounted PVC waits for its
// preparation. A PVC that does not exist yet is gated too: it may be created
// with prepare annotations, and the gate controller releases the Pod once
// every claim exists and is ready.
func (m *Mutator) applyStorageGate(ctx context.Context, pod *corev1.Pod, namespace string) (bool, error) {
	if pod.Spec.NodeName != "" {
		return false, nil // a bound Pod cannot carry scheduling gates
	}
	need := false
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		pvc, err := m.PVCs.GetPVC(ctx, namespace, v.PersistentVolumeClaim.ClaimName)
		if err != nil {
			return false, fmt.Errorf("storage gate: reading PVC %s/%s: %w", namespace, v.PersistentVolumeClaim.ClaimName, err)
		}
		if pvc == nil || pvcspec.NeedsPreparation(pvc) {
			need = true
			break
		}
	}
	if !need || hasGate(pod) {
		return need, nil
	}
	pod.Spec.SchedulingGates = append(pod.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: api.SchedulingGateStorage})
	return true, nil
}

func hasGate(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == api.SchedulingGateStorage })
}

// container is an injected container with the API server's defaults set.
func (m *Mutator) container(name, image string) corev1.Container {
	policy := m.Config.ImagePullPolicy
	if policy == "" {
		policy = defaultPullPolicy(image)
	}
	return corev1.Container{
		Name: name, Image: image, ImagePullPolicy: policy,
		TerminationMessagePath:   terminationMessagePath,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
	}
}

// defaultPullPolicy mirrors the API server: Always for :latest or untagged.
func defaultPullPolicy(image string) corev1.PullPolicy {
	if strings.Contains(image, "@") {
		return corev1.PullIfNotPresent
	}
	_, tag, ok := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
	if !ok || tag == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}

func upsertVolume(pod *corev1.Pod, v corev1.Volume) {
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == v.Name {
			pod.Spec.Volumes[i] = v
			return
		}
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, v)
}

func upsertMount(c *corev1.Container, vm corev1.VolumeMount, key string) error {
	for i, have := range c.VolumeMounts {
		if have.Name == vm.Name {
			c.VolumeMounts[i] = vm
			return nil
		}
		if path.Clean(have.MountPath) == vm.MountPath {
			return invalidAnnotation(key, "container %s already mounts volume %s at %s, where the framework socket directory goes; set %s to a socket in another directory", Quote(c.Name), Quote(have.Name), vm.MountPath, key)
		}
	}
	c.VolumeMounts = append(c.VolumeMounts, vm)
	return nil
}

// upsertEnv sets each variable, keeping the position of one that exists.
func upsertEnv(c *corev1.Container, vars []corev1.EnvVar) {
	for _, v := range vars {
		i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == v.Name })
		if i >= 0 {
			c.Env[i] = v
		} else {
			c.Env = append(c.Env, v)
		}
	}
}

// sidecarOrder is the order of runplane's sidecars at the head of the init
// containers: they start before any user init container.
var sidecarOrder = []string{api.SidecarContainerName, SSHInstallContainerName}

func upsertSidecar(pod *corev1.Pod, sc corev1.Container) {
	var ours, rest []corev1.Container
	for _, c := range pod.Spec.InitContainers {
		switch {
		case c.Name == sc.Name:
			// Replaced, never merged: MutateAdmission strips incoming
			// runplane containers and compares them with the injected ones.
		case slices.Contains(sidecarOrder, c.Name):
			ours = append(ours, c)
		default:
			rest = append(rest, c)
		}
	}
	ours = append(ours, sc)
	slices.SortStableFunc(ours, func(a, b corev1.Container) int {
		return slices.Index(sidecarOrder, a.Name) - slices.Index(sidecarOrder, b.Name)
	})
	pod.Spec.InitContainers = append(ours, rest...)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// restrictedSecurityContext meets Pod Security "restricted" for a container
// runplane injects: its own non-root user, no privilege escalation, no
// capabilities, the runtime's seccomp profile, a read-only root.
func restrictedSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(api.ImageUID), RunAsGroup: ptr.To(api.ImageUID),
		AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}
