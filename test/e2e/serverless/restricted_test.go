package serverless

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/activator"
	"github.com/runplane/runplane/test/cluster"
)

// restrictNamespace makes name enforce Pod Security "restricted" and puts
// it under a compute ResourceQuota (requests and limits of cpu and memory:
// the API server then refuses every Pod with a container that lacks them).
// It returns once the quota controller has synced the quota (before that
// the API server refuses every Pod: "status unknown for quota").
func restrictNamespace(ctx context.Context, c *cluster.Cluster, name string) error {
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted","pod-security.kubernetes.io/enforce-version":"latest"}}}`)
	if _, err := c.Client().CoreV1().Namespaces().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("labelling namespace %s restricted: %w", name, err)
	}
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "compute", Namespace: name}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
		corev1.ResourceRequestsCPU: resource.MustParse("200"), corev1.ResourceRequestsMemory: resource.MustParse("1Ti"),
		corev1.ResourceLimitsCPU: resource.MustParse("400"), corev1.ResourceLimitsMemory: resource.MustParse("2Ti"),
	}}}
	if _, err := c.Client().CoreV1().ResourceQuotas(name).Create(ctx, q, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ResourceQuota in %s: %w", name, err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := c.Client().CoreV1().ResourceQuotas(name).Get(ctx, "compute", metav1.GetOptions{})
		return err == nil && len(got.Status.Hard) > 0, nil
	})
}

// restrictedContainer is a user container that meets "restricted" by its
// own securityContext and carries requests and limits.
func restrictedContainer(name, image string) corev1.Container {
	return corev1.Container{Name: name, Image: image,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(1000)), AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		},
	}
}

// The namespace of every test here enforces "restricted" and a compute
// quota; a Pod runplane changes is still admitted: a pool scales from zero
// and answers (with Events and the pool condition on its Deployment), an
// SSH Pod and a GPU pool Pod are created, and a stock Deployment whose
// template runs as root gets its placeholder. A user container that is not
// restricted is still refused: runplane does not widen what the namespace
// allows.
func TestRestrictedNamespaceAdmitsRunplanePods(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := st.Cluster.Client()
	got, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "restricted", got.Labels["pod-security.kubernetes.io/enforce"])

	t.Run("serverless", func(t *testing.T) {
		pool(t, "strict", 0, 1, nil)
		var rec messages.Record
		code := invoke(t, "strict", map[string]any{"mode": "sync", "timeoutSeconds": 90, "payload": map[string]string{"p": "x"}}, &rec)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, messages.StateSucceeded, rec.State)
		// kubectl describe deploy: the scale Event and the pool condition.
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			evs, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "regarding.name=strict"})
			if err != nil {
				return false, err
			}
			for _, e := range evs.Items {
				if e.Reason == activator.ReasonScaledFromZero && e.Regarding.Kind == "Deployment" && strings.Contains(e.Note, "from 0 to 1") {
					return true, nil
				}
			}
			return false, nil
		}), "no ScaledFromZero Event on Deployment strict")
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			d, err := kube.AppsV1().Deployments(ns).Get(ctx, "strict", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			avail := false
			for _, c := range d.Status.Conditions {
				avail = avail || c.Type == appsv1.DeploymentAvailable
			}
			for _, c := range d.Status.Conditions {
				// Next to the Deployment controller's own conditions,
				// which it wrote since.
				if c.Type == activator.PoolConditionType && c.Status == corev1.ConditionTrue && c.Reason == activator.ReasonScaledFromZero && avail {
					return true, nil
				}
			}
			return false, nil
		}), "no RunplanePool condition beside Available on Deployment strict")
	})

	t.Run("ssh", func(t *testing.T) {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "alice-keys", Namespace: ns},
			StringData: map[string]string{api.SSHAuthorizedKeysKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBvNdQGsN5O8FRfJKx5bEcnS6w+R9Ayoi5nEu6f4vRQ2 alice\n"}}
		_, err := kube.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{})
		require.NoError(t, client0(err))
		dev := restrictedContainer("dev", "ubuntu:24.04")
		dev.Command = []string{"sleep", "infinity"} // SSH runs in front of it
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: ns, Labels: map[string]string{api.LabelSSH: api.SSHEnabled},
			Annotations: map[string]string{api.AnnotationSSHAuthorizedKeys: "alice-keys"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{dev}, TerminationGracePeriodSeconds: ptr.To[int64](0)}}
		created, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err, "an SSH Pod in a restricted namespace with a quota")
		t.Cleanup(func() { _ = kube.CoreV1().Pods(ns).Delete(context.Background(), "box", metav1.DeleteOptions{}) })
		names := map[string]bool{}
		for _, c := range created.Spec.InitContainers {
			names[c.Name] = true
		}
		assert.True(t, names["runplane-ssh-install"] && !names[api.SSHContainerName], "SSH install container injected, no SSH sidecar: %v", names)
	})

	t.Run("user container not restricted", func(t *testing.T) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "loose-", Namespace: ns, Labels: map[string]string{api.LabelPool: "loose"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "x", Resources: restrictedContainer("", "").Resources}}}}
		_, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.Error(t, err)
		assert.Contains(t, err.Error(), `violates PodSecurity "restricted:latest"`)
		assert.Contains(t, err.Error(), `container "app"`)
		assert.NotContains(t, err.Error(), api.SidecarContainerName, "runplane's sidecar is not what violates it")
	})

	t.Run("stock and gpu", func(t *testing.T) {
		ensureGPUCatalog(t, ctx)
		// The template runs as root with privilege escalation: the webhook
		// replaces it by a pause container that is restricted on its own.
		labels := map[string]string{api.LabelStock: "g1.1"}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "stock-g1", Namespace: ns},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "hold", Image: "busybox", SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To(int64(0)), AllowPrivilegeEscalation: ptr.To(true)}}}}}}}
		_, err := kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = kube.AppsV1().Deployments(ns).Delete(context.Background(), "stock-g1", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
		})
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			l, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelStock + "=g1.1"})
			return err == nil && len(l.Items) == 1, nil
		}), "no placeholder Pod (a FailedCreate on its ReplicaSet?)")

		gpu := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "gpu-pool-", Namespace: ns,
			Labels: map[string]string{api.LabelGPUSpec: "g1.1", api.LabelPool: "gpu"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{restrictedContainer("model", "x")}}}
		_, err = kube.CoreV1().Pods(ns).Create(ctx, gpu, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(t, err, "a GPU pool Pod in a restricted namespace with a quota")
	})
}

func client0(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// ensureGPUCatalog creates the catalog and runplane's PriorityClasses, and
// waits until the webhook knows spec g1.1.
func ensureGPUCatalog(t *testing.T, ctx context.Context) {
	t.Helper()
	kube := st.Cluster.Client()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: api.CatalogConfigMap, Namespace: api.DefaultNamespace},
		Data: map[string]string{"g1.1": "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\n"}}
	_, err := kube.CoreV1().ConfigMaps(api.DefaultNamespace).Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, client0(err))
	for name, value := range map[string]int32{api.PriorityClassWorkload: 1000, api.PriorityClassStock: -1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		_, err := kube.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{})
		require.NoError(t, client0(err))
	}
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns, Labels: map[string]string{api.LabelGPUSpec: "g1.1"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{restrictedContainer("app", "x")}}}
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, nil
	}), "the webhook does not know GPU spec g1.1")
}
