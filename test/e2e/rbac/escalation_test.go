package rbac_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/test/e2e/rbac"
)

// tenantNS stands for any tenant's namespace.
const tenantNS = controllersNS

// TestEscalationPaths asks the API server (SubjectAccessReview, what
// kubectl auth can-i asks) whether each of runplane's ServiceAccounts may
// take a path to another identity's powers; every answer must be no. The
// paths are those a hostile probe found or that lead to the same place:
// Secrets (a token Secret minted for a privileged ServiceAccount and read
// back), ServiceAccount tokens, RBAC objects, impersonation, and the
// cluster's default scheduler Lease.
func TestEscalationPaths(t *testing.T) {
	install(t)
	type ra = authorizationv1.ResourceAttributes
	everywhere := []string{tenantNS, releaseNS, "kube-system"}
	var tests []struct {
		sa   string
		attr ra
	}
	add := func(sas []string, attrs ...ra) {
		for _, sa := range sas {
			for _, a := range attrs {
				tests = append(tests, struct {
					sa   string
					attr ra
				}{sa, a})
			}
		}
	}
	all := []string{"runplane-controller", "runplane-webhook", "runplane-queue", "runplane-scheduler"}
	for _, ns := range everywhere {
		add(all,
			ra{Namespace: ns, Verb: "create", Resource: "serviceaccounts", Subresource: "token", Name: "default"},
			ra{Namespace: ns, Verb: "create", Resource: "serviceaccounts"},
			ra{Namespace: ns, Verb: "get", Resource: "secrets", Name: "some-token"},
			ra{Namespace: ns, Verb: "list", Resource: "secrets"},
			ra{Namespace: ns, Verb: "create", Resource: "rolebindings", Group: "rbac.authorization.k8s.io"},
			ra{Namespace: ns, Verb: "bind", Resource: "clusterroles", Group: "rbac.authorization.k8s.io", Name: "cluster-admin"},
			ra{Namespace: ns, Verb: "create", Resource: "pods", Subresource: "exec"},
			ra{Namespace: ns, Verb: "impersonate", Resource: "serviceaccounts"},
		)
		// Secrets in any namespace but runplane's own (the webhook's serving
		// certificate, each component's /metrics certificate, the NATS trust
		// Secret and the callbacks' key the queue creates at start): the
		// token-Secret policy guards those.
		if ns != releaseNS {
			add([]string{"runplane-controller", "runplane-scheduler", "runplane-queue"}, ra{Namespace: ns, Verb: "create", Resource: "secrets"})
		}
		// The Secret the controller used to copy into tenant namespaces.
		add(all, ra{Namespace: ns, Verb: "get", Resource: "secrets", Name: api.NATSCredentialsSecret},
			ra{Namespace: ns, Verb: "update", Resource: "secrets", Name: api.NATSCredentialsSecret})
	}
	add([]string{"runplane-webhook"}, ra{Namespace: tenantNS, Verb: "create", Resource: "secrets"},
		ra{Namespace: "kube-system", Verb: "create", Resource: "secrets"})
	add(all,
		ra{Verb: "*", Resource: "*", Group: "*"},
		ra{Verb: "create", Resource: "clusterrolebindings", Group: "rbac.authorization.k8s.io"},
		ra{Verb: "escalate", Resource: "clusterroles", Group: "rbac.authorization.k8s.io"},
		ra{Verb: "impersonate", Resource: "users"},
		ra{Verb: "create", Resource: "certificatesigningrequests", Group: "certificates.k8s.io"},
	)
	// The cluster's default scheduler: its Lease (kube-system/kube-scheduler)
	// and Leases outside the release namespace at all.
	add([]string{"runplane-scheduler"},
		ra{Namespace: "kube-system", Verb: "update", Resource: "leases", Group: "coordination.k8s.io", Name: "kube-scheduler"},
		ra{Namespace: "kube-system", Verb: "get", Resource: "leases", Group: "coordination.k8s.io", Name: "kube-scheduler"},
		ra{Namespace: "kube-system", Verb: "create", Resource: "leases", Group: "coordination.k8s.io"},
		ra{Namespace: tenantNS, Verb: "update", Resource: "leases", Group: "coordination.k8s.io", Name: "kube-scheduler"},
	)
	for _, tt := range tests {
		a := tt.attr
		name := tt.sa + " " + a.Verb + " " + a.Group + "/" + a.Resource + "/" + a.Subresource + " " + a.Namespace + "/" + a.Name
		t.Run(name, func(t *testing.T) {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               rbac.ServiceAccountUser(releaseNS, tt.sa),
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNS, "system:authenticated"},
				ResourceAttributes: &a,
			}}
			got, err := env.Client().AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
			require.NoError(t, err)
			assert.False(t, got.Status.Allowed, "%s may %s (%s)", tt.sa, name, got.Status.Reason)
		})
	}
}

// TestTokenSecretRefused: even where a runplane ServiceAccount may create
// Secrets (the webhook, in its own namespace, under the name it may read
// back), it cannot create a ServiceAccount token Secret: on the
// unguarded chart the webhook minted one for runplane-controller under
// its own Secret's name and could read the token back.
func TestTokenSecretRefused(t *testing.T) {
	install(t)
	tests := []struct{ sa, ns, name string }{
		{"runplane-webhook", releaseNS, "runplane-webhook-tls-mint"},
		{"runplane-controller", tenantNS, "mint"},
		{"runplane-controller", releaseNS, "runplane-controller-metrics-tls-mint"},
		{"runplane-queue", releaseNS, "mint"},
		{"runplane-scheduler", releaseNS, "mint"},
	}
	for _, tt := range tests {
		t.Run(tt.sa, func(t *testing.T) {
			c := as(t, tt.sa)
			s := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: tt.name, Annotations: map[string]string{corev1.ServiceAccountNameKey: "runplane-controller"}},
				Type:       corev1.SecretTypeServiceAccountToken,
			}
			// A new admission policy takes effect within seconds of the install.
			refused(t, tt.sa+" creating a token Secret for runplane-controller", func() error {
				_, err := c.CoreV1().Secrets(tt.ns).Create(t.Context(), s, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				return err
			})
		})
	}
}

// TestControllerWorkloadsPinned: the controller may create Deployments and
// Jobs in tenant namespaces, and a Pod may run as any ServiceAccount of its
// namespace; the chart's admission policy refuses a workload that names
// another ServiceAccount, mounts a token or a Secret, lacks runplane's
// managed-by label, or lives in the platform's namespaces.
func TestControllerWorkloadsPinned(t *testing.T) {
	install(t)
	c := as(t, "runplane-controller")
	deployment := func(ns, sa string, automount *bool) *appsv1.Deployment {
		labels := map[string]string{"app": "probe", api.LabelManagedBy: api.ManagedByController}
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Labels: labels},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{ServiceAccountName: sa, AutomountServiceAccountToken: automount,
						Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
				},
			},
		}
	}
	tests := []struct {
		name    string
		d       *appsv1.Deployment
		allowed bool
	}{
		{"another ServiceAccount", deployment(tenantNS, "privileged", ptr.To(false)), false},
		{"the default ServiceAccount with its token", deployment(tenantNS, "default", nil), false},
		{"kube-system", deployment("kube-system", "default", ptr.To(false)), false},
		{"runplane's namespace", deployment(releaseNS, "default", ptr.To(false)), false},
		{"a privileged container", with(deployment(tenantNS, "default", ptr.To(false)), func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}), false},
		{"a hostPath volume", with(deployment(tenantNS, "default", ptr.To(false)), func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}), false},
		{"the host's PID namespace", with(deployment(tenantNS, "default", ptr.To(false)), func(s *corev1.PodSpec) { s.HostPID = true }), false},
		{"SYS_ADMIN", with(deployment(tenantNS, "default", ptr.To(false)), func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}
		}), false},
		{"a Secret volume", with(deployment(tenantNS, "default", ptr.To(false)), func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tenant-db"}}}}
		}), false},
		{"a Secret in env", with(deployment(tenantNS, "default", ptr.To(false)), func(s *corev1.PodSpec) {
			s.Containers[0].Env = []corev1.EnvVar{{Name: "PW", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "tenant-db"}, Key: "password"}}}}
		}), false},
		{"a Secret in envFrom", with(deployment(tenantNS, "default", ptr.To(false)), func(s *corev1.PodSpec) {
			s.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "tenant-db"}}}}
		}), false},
		{"no managed-by label", func() *appsv1.Deployment {
			d := deployment(tenantNS, "default", ptr.To(false))
			d.Labels = nil
			return d
		}(), false},
		{"what the accessor controller creates", deployment(tenantNS, "default", ptr.To(false)), true},
		{"what the prepare controller's image Job keeps", with(deployment(tenantNS, "default", ptr.To(false)), func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"CHOWN", "FOWNER"}}}
		}), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			create := func() error {
				_, err := c.AppsV1().Deployments(tt.d.Namespace).Create(t.Context(), tt.d, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				return err
			}
			if tt.allowed {
				require.NoError(t, create())
				return
			}
			refused(t, "runplane-controller creating a Deployment with "+tt.name, create)
		})
	}
}

// TestPodUpdatesBounded: runplane's ServiceAccounts may patch Pods
// cluster-wide (RBAC cannot name fields); the chart's policy
// runplane-pod-updates refuses an image change anywhere, any update in
// the platform's namespaces (kube-system, runplane's), and from the queue
// anything but the deletion cost.
func TestPodUpdatesBounded(t *testing.T) {
	install(t)
	ctx := t.Context()
	pod := func(ns string) *corev1.Pod {
		p, err := env.Client().CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "victim-", Labels: map[string]string{"app": "victim"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		return p
	}
	tenant, system, runplane := pod(tenantNS), pod("kube-system"), pod(releaseNS)
	patch := func(sa string, p *corev1.Pod, body string) error {
		_, err := as(t, sa).CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, []byte(body),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	const (
		image = `{"spec":{"containers":[{"name":"c","image":"attacker.example/implant:1"}]}}`
		cost  = `{"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"-5"}}}`
		label = `{"metadata":{"labels":{"app":"other"}}}`
	)
	tests := []struct {
		name, sa string
		pod      *corev1.Pod
		body     string
		allowed  bool
	}{
		{"queue swaps an image", "runplane-queue", tenant, image, false},
		{"controller swaps an image", "runplane-controller", tenant, image, false},
		{"extender swaps an image", "runplane-scheduler", tenant, image, false},
		{"queue in kube-system", "runplane-queue", system, cost, false},
		{"controller in kube-system", "runplane-controller", system, `{"metadata":{"annotations":{"x":"y"}}}`, false},
		// A Pod of runplane's namespace relabelled out of its Service (the webhook's: it fails closed).
		{"controller in runplane's namespace", "runplane-controller", runplane, label, false},
		{"extender in runplane's namespace", "runplane-scheduler", runplane, `{"metadata":{"annotations":{"runplane.io/claimed-stock":"x"}}}`, false},
		{"queue changes a label", "runplane-queue", tenant, label, false},
		{"queue sets the deletion cost", "runplane-queue", tenant, cost, true},
		{"controller annotates", "runplane-controller", tenant, `{"metadata":{"annotations":{"runplane.io/ssh-endpoint":"x"}}}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			try := func() error { return patch(tt.sa, tt.pod, tt.body) }
			if tt.allowed {
				require.NoError(t, try())
				return
			}
			refused(t, tt.name, try)
		})
	}
}

// with modifies d's Pod template.
func with(d *appsv1.Deployment, modify func(*corev1.PodSpec)) *appsv1.Deployment {
	modify(&d.Spec.Template.Spec)
	return d
}

// as is a client that impersonates runplane's ServiceAccount sa.
func as(t *testing.T, sa string) kubernetes.Interface {
	t.Helper()
	rec := &rbac.Recorder{}
	c, err := kubernetes.NewForConfig(rec.As(env.RESTConfig(), releaseNS, sa))
	require.NoError(t, err)
	return c
}

// refused waits (up to 10s, for a just-installed admission policy) until
// try fails with Forbidden or Invalid, and fails t if it never does.
func refused(t *testing.T, what string, try func() error) {
	t.Helper()
	var last error
	ok := assert.Eventually(t, func() bool {
		last = try()
		return apierrors.IsForbidden(last) || apierrors.IsInvalid(last)
	}, 10*time.Second, 200*time.Millisecond)
	if !ok {
		t.Errorf("%s was not refused (last answer: %v)", what, last)
	}
}
