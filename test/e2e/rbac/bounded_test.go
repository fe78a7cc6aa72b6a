package rbac_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/controllers/egress"
	"github.com/runplane/runplane/controllers/sshservice"
	"github.com/runplane/runplane/queue/activator"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/kit"
)

// boundedNS is a tenant namespace of its own: the queue test's activator
// must not discover this test's pool Deployment.
const boundedNS = "rbac-bounded"

// TestScaleServicesAndNetworkPoliciesBounded: RBAC gives the queue
// deployments/scale and deployments/status, and the controller Services,
// NetworkPolicies, Jobs and Deployments, cluster-wide. The chart's
// admission policies keep them to tenants' pools and runplane's own
// objects: a compromised queue cannot scale kube-system's DNS or the
// webhook (which fails closed) to zero, a compromised controller cannot
// turn the webhook's Service into an ExternalName, drop the policies that
// fence NATS, publish a tenant's Pods or mount its Secrets. Every request
// is a dry run; the refusals must come from the named policy, not RBAC.
func TestScaleServicesAndNetworkPoliciesBounded(t *testing.T) {
	install(t)
	ctx := t.Context()
	admin := env.Client()
	require.NoError(t, env.CreateNamespace(ctx, boundedNS))

	// Stand-ins for what the cluster and the tenant own; the chart's own
	// runplane-webhook Deployment and Service, and its NetworkPolicies, are
	// real.
	dep := func(ns, name string, labels map[string]string) *appsv1.Deployment {
		sel := map[string]string{"app": name}
		d, err := admin.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: sel},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			assert.NoError(t, admin.AppsV1().Deployments(ns).Delete(context.Background(), name, metav1.DeleteOptions{}))
		})
		return d
	}
	dep("kube-system", "coredns-standin", nil)
	pool := dep(boundedNS, "pool", map[string]string{api.LabelPool: "echo"})
	dep(boundedNS, "tenant-app", nil)
	// The Deployment controller writes its conditions (Available,
	// Progressing) before the queue's status patches are compared with them.
	eventually(t, nil, 30*time.Second, "the pool Deployment's conditions", func() (bool, error) {
		d, err := admin.AppsV1().Deployments(boundedNS).Get(ctx, pool.Name, metav1.GetOptions{})
		return err == nil && len(d.Status.Conditions) > 0, err
	})
	tenantSvc, err := admin.CoreV1().Services(boundedNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "db"}, Ports: []corev1.ServicePort{{Port: 5432}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.NetworkingV1().NetworkPolicies(boundedNS).Create(ctx, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "default-deny"},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	queue, controller := as(t, "runplane-queue"), as(t, "runplane-controller")
	dry := []string{metav1.DryRunAll}
	scale := func(ns, name string) func() error {
		return func() error {
			sc, err := queue.AppsV1().Deployments(ns).GetScale(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			sc.Spec.Replicas = 0
			if ns == boundedNS {
				sc.Spec.Replicas = 1 // a pool scaled from zero
			}
			_, err = queue.AppsV1().Deployments(ns).UpdateScale(ctx, name, sc, metav1.UpdateOptions{DryRun: dry})
			return err
		}
	}
	status := func(ns, name string, cond appsv1.DeploymentCondition) func() error {
		return func() error {
			patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []appsv1.DeploymentCondition{cond}}})
			if err != nil {
				return err
			}
			_, err = queue.AppsV1().Deployments(ns).Patch(ctx, name, types.StrategicMergePatchType, patch,
				metav1.PatchOptions{DryRun: dry}, "status")
			return err
		}
	}
	poolCondition := appsv1.DeploymentCondition{Type: activator.PoolConditionType, Status: corev1.ConditionTrue, Reason: activator.ReasonScaledFromZero,
		Message: "pool echo scaled from 0 to 1 replicas"}
	unavailable := appsv1.DeploymentCondition{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse, Reason: "Forged"}

	// What the SSH controller writes (sshservice.Reconciler.desired) for a
	// Pod; svc modifies a copy.
	sshService := func(ns string, modify func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: sshservice.ServiceName("devbox"), Namespace: ns,
				Labels:          map[string]string{api.LabelManagedBy: api.ManagedByController, api.LabelSSHPod: "0c6f4b3e-uid"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "devbox", UID: "0c6f4b3e-uid", Controller: ptr.To(true)}}},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{api.LabelSSHPod: "0c6f4b3e-uid"},
				Ports: []corev1.ServicePort{{Name: "ssh", Protocol: corev1.ProtocolTCP, Port: sshservice.ServicePort, TargetPort: intstr.FromInt32(api.SSHPort)}}},
		}
		if modify != nil {
			modify(s)
		}
		return s
	}
	createSvc := func(s *corev1.Service) func() error {
		return func() error {
			_, err := controller.CoreV1().Services(s.Namespace).Create(ctx, s, metav1.CreateOptions{DryRun: dry})
			return err
		}
	}
	// The webhook's Service turned into an ExternalName: AdmissionReviews
	// would go to the attacker.
	hijackWebhook := func() error {
		s, err := controller.CoreV1().Services(releaseNS).Get(ctx, "runplane-webhook", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "attacker.example"}
		_, err = controller.CoreV1().Services(releaseNS).Update(ctx, s, metav1.UpdateOptions{DryRun: dry})
		return err
	}
	publishTenant := func() error {
		s := tenantSvc.DeepCopy()
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		_, err := controller.CoreV1().Services(boundedNS).Update(ctx, s, metav1.UpdateOptions{DryRun: dry})
		return err
	}
	nats := egress.DefaultSettings()
	nats.NATS = egress.NATSEndpoint{Namespace: releaseNS, Port: 4222, PodLabels: map[string]string{"app.kubernetes.io/component": "nats"}}
	createNP := func(np *networkingv1.NetworkPolicy) func() error {
		return func() error {
			_, err := controller.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{DryRun: dry})
			return err
		}
	}
	openAll := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "open", Namespace: boundedNS, Labels: map[string]string{api.LabelManagedBy: api.ManagedByController}},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{}}},
	}
	deleteNP := func(ns, name string) func() error {
		return func() error {
			return controller.NetworkingV1().NetworkPolicies(ns).Delete(ctx, name, metav1.DeleteOptions{DryRun: dry})
		}
	}
	deleteSvc := func(ns, name string) func() error {
		return func() error {
			return controller.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{DryRun: dry})
		}
	}
	deleteDep := func(ns, name string) func() error {
		return func() error {
			return controller.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{DryRun: dry})
		}
	}

	const (
		queueScale = "runplane-queue-scale"
		services   = "runplane-controller-services"
		netpols    = "runplane-controller-networkpolicies"
		workloads  = "runplane-controller-workloads"
		platform   = "the platform's namespaces"
	)
	tests := []struct {
		name string
		try  func() error
		// policy and rule name the refusal; empty policy: admitted.
		policy, rule string
	}{
		{"queue scales kube-system's DNS to zero", scale("kube-system", "coredns-standin"), queueScale, platform},
		{"queue scales runplane-webhook to zero", scale(releaseNS, "runplane-webhook"), queueScale, platform},
		{"queue writes runplane-webhook's status", status(releaseNS, "runplane-webhook", poolCondition), queueScale, platform},
		{"queue writes a non-pool Deployment's status", status(boundedNS, "tenant-app", poolCondition), queueScale, "only of pool Deployments"},
		{"queue forges a pool's Available condition", status(boundedNS, pool.Name, unavailable), queueScale, "only the RunplanePool condition"},
		{"queue scales a tenant's pool", scale(boundedNS, pool.Name), "", ""},
		{"queue writes a pool's condition", status(boundedNS, pool.Name, poolCondition), "", ""},

		{"controller turns runplane-webhook's Service into an ExternalName", hijackWebhook, services, platform},
		{"controller deletes runplane-webhook's Service", deleteSvc(releaseNS, "runplane-webhook"), services, platform},
		{"controller creates a Service in kube-system", createSvc(sshService("kube-system", nil)), services, platform},
		{"controller creates an ExternalName Service", createSvc(sshService(boundedNS, func(s *corev1.Service) {
			s.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "attacker.example"}
		})), services, "ClusterIP, NodePort or LoadBalancer"},
		{"controller creates a Service with externalIPs", createSvc(sshService(boundedNS, func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"203.0.113.7"}
		})), services, "without externalIPs"},
		{"controller creates an unlabelled Service", createSvc(sshService(boundedNS, func(s *corev1.Service) {
			delete(s.Labels, api.LabelManagedBy)
		})), services, "only its own Services"},
		{"controller publishes a tenant's Pods", createSvc(sshService(boundedNS, func(s *corev1.Service) {
			s.Spec.Selector = map[string]string{"app": "db"}
		})), services, "select only runplane's Pods"},
		{"controller changes a tenant's Service", publishTenant, services, "only its own Services"},
		{"controller creates the SSH Service", createSvc(sshService(boundedNS, nil)), "", ""},

		{"controller deletes the NetworkPolicy that fences NATS", deleteNP(releaseNS, "runplane-nats"), netpols, platform},
		{"controller creates a NetworkPolicy in kube-system", createNP(egress.Policy("kube-system", nats)), netpols, platform},
		{"controller deletes a tenant's NetworkPolicy", deleteNP(boundedNS, "default-deny"), netpols, "only its own NetworkPolicies"},
		{"controller opens a tenant's Pods", createNP(openAll), netpols, "select only runplane's Pods"},
		{"controller creates the egress NetworkPolicy", createNP(egress.Policy(boundedNS, nats)), "", ""},

		{"controller deletes runplane-webhook's Deployment", deleteDep(releaseNS, "runplane-webhook"), workloads, platform},
		{"controller deletes a tenant's Deployment", deleteDep(boundedNS, "tenant-app"), workloads, "only its own Jobs and Deployments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.policy == "" {
				require.NoError(t, tt.try())
				return
			}
			refusedBy(t, tt.name, tt.policy, tt.rule, tt.try)
		})
	}
}

// refusedBy waits (up to 10s, for a just-installed admission policy) until
// try is refused by the ValidatingAdmissionPolicy policy with a message
// containing rule, and fails t if it never is: an RBAC refusal or another
// policy's does not count.
func refusedBy(t *testing.T, what, policy, rule string, try func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		last = try()
		return last != nil && strings.Contains(last.Error(), "ValidatingAdmissionPolicy '"+policy+"'") && strings.Contains(last.Error(), rule), nil
	})
	require.NoError(t, err, "%s was not refused by %s naming %q (last answer: %v)", what, policy, rule, last)
}

// TestClaimsAndPodStatusBounded: the controller patches PVCs cluster-wide
// for its runplane.io/ status annotations, and kube-scheduler patches
// pods/status cluster-wide for its scheduling conditions; RBAC cannot name
// fields. runplane-controller-claims keeps the controller to those
// annotations outside the platform's namespaces; runplane-scheduler-pod-status
// keeps a Pod's phase, IPs and Ready condition as the kubelet wrote them, so
// a compromised scheduler cannot pull a Pod out of its Service's endpoints,
// and lets it name a Pod's resource claims only while the Pod is unbound
// (the extender's DRA stock hand-over), never a bound Pod's.
func TestClaimsAndPodStatusBounded(t *testing.T) {
	install(t)
	ctx := t.Context()
	admin := env.Client()
	claimIn := func(ns string) *corev1.PersistentVolumeClaim {
		c := kit.Claim("", "1Gi", map[string]string{"team": "a"})
		c.GenerateName = "bounded-"
		c, err := admin.CoreV1().PersistentVolumeClaims(ns).Create(ctx, c, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			assert.NoError(t, admin.CoreV1().PersistentVolumeClaims(ns).Delete(context.Background(), c.Name, metav1.DeleteOptions{}))
		})
		return c
	}
	tenantClaim, systemClaim := claimIn(tenantNS), claimIn("kube-system")
	pod, err := admin.CoreV1().Pods(tenantNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "bounded-"},
		Spec:       corev1.PodSpec{NodeName: "rbac-cpu-0", Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, admin.CoreV1().Pods(tenantNS).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	})
	eventually(t, nil, 30*time.Second, "the Pod running with an IP (kwok)", func() (bool, error) {
		p, err := admin.CoreV1().Pods(tenantNS).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", err
	})

	// Pods with a DRA claim: the extender's stock hand-over names a
	// placeholder's claim in an unbound GPU Pod's status; a bound Pod's
	// claims are the kubelet's.
	draPod := func(node, scheduler string) *corev1.Pod {
		spec := corev1.PodSpec{NodeName: node, SchedulerName: scheduler, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}
		if node == "" {
			// Unbound for the test's length, whether or not a scheduler of that name runs.
			spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "runplane.io/test-hold"}}
		}
		cluster.UseClaimTemplate(&spec, "bounded-gpu")
		p, err := admin.CoreV1().Pods(tenantNS).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "bounded-dra-"}, Spec: spec}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			assert.NoError(t, admin.CoreV1().Pods(tenantNS).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
		})
		return p
	}
	boundDRA, unboundDRA, otherSchedulers := draPod("rbac-cpu-0", api.SchedulerName), draPod("", api.SchedulerName), draPod("", corev1.DefaultSchedulerName)

	controller, scheduler := as(t, "runplane-controller"), as(t, "runplane-scheduler")
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	// The hand-over's own patch (extender/drastock.go, step 3): the Pod's
	// UID as precondition, the placeholder's claim as its claim "gpu".
	handOver := func(p *corev1.Pod) func() error {
		return func() error {
			body := fmt.Sprintf(`{"metadata":{"uid":%q},"status":{"resourceClaimStatuses":[{"name":"gpu","resourceClaimName":"placeholder-claim"}]}}`, p.UID)
			_, err := scheduler.CoreV1().Pods(tenantNS).Patch(ctx, p.Name, types.MergePatchType, []byte(body), dry, "status")
			return err
		}
	}
	patchClaim := func(c *corev1.PersistentVolumeClaim, body string) func() error {
		return func() error {
			_, err := controller.CoreV1().PersistentVolumeClaims(c.Namespace).Patch(ctx, c.Name, types.MergePatchType, []byte(body), dry)
			return err
		}
	}
	// Conditions merge by type (strategic merge patch); the IP lists are
	// replaced whole (merge patch), as a rewrite would.
	patchStatus := func(pt types.PatchType, body string) func() error {
		return func() error {
			_, err := scheduler.CoreV1().Pods(tenantNS).Patch(ctx, pod.Name, pt, []byte(body), dry, "status")
			return err
		}
	}
	smp := types.StrategicMergePatchType
	const (
		claims    = "runplane-controller-claims"
		podStatus = "runplane-scheduler-pod-status"
		phase     = `{"metadata":{"annotations":{"runplane.io/prepare-phase":"Succeeded"}}}`
	)
	tests := []struct {
		name         string
		try          func() error
		policy, rule string
	}{
		{"controller annotates a claim in kube-system", patchClaim(systemClaim, phase), claims, "platform's namespaces"},
		{"controller pins a claim to a node", patchClaim(tenantClaim, `{"metadata":{"annotations":{"volume.kubernetes.io/selected-node":"rbac-gpu-0"}}}`), claims, "only the runplane.io/ annotations"},
		{"controller holds a claim with a finalizer", patchClaim(tenantClaim, `{"metadata":{"finalizers":["example.com/hold"]}}`), claims, "only the runplane.io/ annotations"},
		{"controller relabels a claim", patchClaim(tenantClaim, `{"metadata":{"labels":{"team":"b"}}}`), claims, "only the runplane.io/ annotations"},
		{"controller writes its prepare status", patchClaim(tenantClaim, phase), "", ""},

		{"scheduler marks a Pod not Ready", patchStatus(smp, `{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`), podStatus, "only a Pod's PodScheduled and DisruptionTarget"},
		{"scheduler fails a Pod", patchStatus(smp, `{"status":{"phase":"Failed"}}`), podStatus, "phase, IPs or container statuses"},
		{"scheduler moves a Pod's IP", patchStatus(types.MergePatchType, `{"status":{"podIP":"10.66.0.66","podIPs":[{"ip":"10.66.0.66"}]}}`), podStatus, "phase, IPs or container statuses"},
		{"scheduler sets PodScheduled", patchStatus(smp, `{"status":{"conditions":[{"type":"PodScheduled","status":"False","reason":"Unschedulable"}]}}`), "", ""},
		{"scheduler marks a preemption victim", patchStatus(smp, `{"status":{"conditions":[{"type":"DisruptionTarget","status":"True","reason":"PreemptionByScheduler"}]}}`), "", ""},
		{"extender hands a DRA claim to an unbound Pod", handOver(unboundDRA), "", ""},
		{"extender hands a DRA claim to a bound Pod", handOver(boundDRA), podStatus, "resource claims (status.resourceClaimStatuses, status.extendedResourceClaimStatus) only while the Pod is unbound and placed by runplane-scheduler"},
		{"extender hands a DRA claim to another scheduler's Pod", handOver(otherSchedulers), podStatus, "only while the Pod is unbound and placed by runplane-scheduler"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.policy == "" {
				require.NoError(t, tt.try())
				return
			}
			refusedBy(t, tt.name, tt.policy, tt.rule, tt.try)
		})
	}
}

// TestPoliciesTypeCheck: the API server type-checks every
// ValidatingAdmissionPolicy against the kinds it matches; the chart's come
// out without a warning. A warning is a field path or an operator the
// checker does not know, which at run time may be an error, and an error
// under failurePolicy Fail refuses runplane's own requests.
func TestPoliciesTypeCheck(t *testing.T) {
	install(t)
	policies := env.Client().AdmissionregistrationV1().ValidatingAdmissionPolicies()
	list, err := policies.List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=runplane"})
	require.NoError(t, err)
	require.NotEmpty(t, list.Items, "the chart's ValidatingAdmissionPolicies")
	for _, p := range list.Items {
		t.Run(p.Name, func(t *testing.T) {
			eventually(t, nil, 30*time.Second, "the policy type-checked", func() (bool, error) {
				got, err := policies.Get(t.Context(), p.Name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				p = *got
				return p.Status.ObservedGeneration == p.Generation && p.Status.TypeChecking != nil, nil
			})
			for _, w := range p.Status.TypeChecking.ExpressionWarnings {
				t.Errorf("%s: %s", w.FieldRef, w.Warning)
			}
		})
	}
}

// TestSchedulerReservationsBounded: the scheduler's ServiceAccount may
// create Pods in the release namespace for the extender's reservations
// (a preempting GPU Pod's room); any other Pod there — one that runs as
// another of runplane's ServiceAccounts, mounts a volume, runs another
// image, or is not a bound reservation — is refused by
// runplane-scheduler-reservations.
func TestSchedulerReservationsBounded(t *testing.T) {
	install(t)
	ctx := t.Context()
	scheduler := as(t, "runplane-scheduler")
	reservation := func(mod func(*corev1.Pod)) func() error {
		return func() error {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "runplane-reservation-", Labels: map[string]string{api.LabelReservedFor: "some-uid"}},
				Spec: corev1.PodSpec{
					NodeName: "rbac-gpu-0", AutomountServiceAccountToken: ptr.To(false),
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65535)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10", SecurityContext: &corev1.SecurityContext{
						AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
				},
			}
			ns := releaseNS
			if mod != nil {
				mod(p)
			}
			if p.Namespace != "" {
				ns = p.Namespace
			}
			_, err := scheduler.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}
	}
	const policy, rule = "runplane-scheduler-reservations", "only reservation Pods"
	tests := []struct {
		name string
		mod  func(*corev1.Pod)
		ok   bool
	}{
		{"a reservation", nil, true},
		{"as runplane-controller", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "runplane-controller" }, false},
		{"with a token", func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil }, false},
		{"mounting a Secret", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "runplane-nats"}}}}
		}, false},
		{"another image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "example.com/shell:1" }, false},
		{"unbound", func(p *corev1.Pod) { p.Spec.NodeName = "" }, false},
		{"unlabelled", func(p *corev1.Pod) { p.Labels = nil }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.ok {
				require.NoError(t, reservation(tt.mod)())
				return
			}
			refusedBy(t, tt.name, policy, rule, reservation(tt.mod))
		})
	}

	// A reservation as the extender leaves it: deleted, held by its
	// finalizer. The scheduler may remove the finalizer and nothing else;
	// nobody (a kubelet included) may turn it terminal, which would let
	// kube-scheduler give its room away.
	admin := env.Client()
	held, err := admin.CoreV1().Pods(releaseNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "runplane-reservation-", Labels: map[string]string{api.LabelReservedFor: "some-uid"},
			Finalizers: []string{api.FinalizerReservation}},
		Spec: corev1.PodSpec{NodeName: "rbac-gpu-0", Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.CoreV1().Pods(releaseNS).Patch(context.Background(), held.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		assert.NoError(t, err)
		_ = admin.CoreV1().Pods(releaseNS).Delete(context.Background(), held.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	require.NoError(t, admin.CoreV1().Pods(releaseNS).Delete(ctx, held.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	patch := func(c kubernetes.Interface, body string, sub ...string) func() error {
		return func() error {
			_, err := c.CoreV1().Pods(releaseNS).Patch(ctx, held.Name, types.MergePatchType, []byte(body), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, sub...)
			return err
		}
	}
	require.NoError(t, patch(scheduler, `{"metadata":{"finalizers":null}}`)(), "the extender releases a reservation")
	refusedBy(t, "scheduler relabels a reservation", "runplane-pod-updates", "platform's namespaces", patch(scheduler, `{"metadata":{"finalizers":null,"labels":{"app":"x"}}}`))
	refusedBy(t, "a reservation turned Failed", "runplane-reservation-status", "never turns Succeeded or Failed", patch(admin, `{"status":{"phase":"Failed"}}`, "status"))
}
