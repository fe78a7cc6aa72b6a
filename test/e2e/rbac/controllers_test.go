package rbac_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/controllers"
	"github.com/runplane/runplane/controllers/accessor"
	cconfig "github.com/runplane/runplane/controllers/config"
	"github.com/runplane/runplane/controllers/egress"
	"github.com/runplane/runplane/controllers/sshservice"
	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/pvcspec"
	"github.com/runplane/runplane/test/e2e/rbac"
	"github.com/runplane/runplane/test/kit"
	"github.com/runplane/runplane/test/scrape"
)

const testImage = "ghcr.io/runplane/runplane:rbac-test"

func mounting(name, claim string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: "busybox:1.36"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		},
	}
}

// TestControllers runs every controller (with the SSH Service controller)
// as runplane-controller, with the arguments the chart gives it, and
// checks each does its work in a user namespace.
func TestControllers(t *testing.T) {
	install(t)
	rec := &rbac.Recorder{}
	t.Cleanup(func() { checkNoDenials(t, "runplane-controller", rec, globalLog) })
	// The settings the chart installed (the ConfigMap runplane-controller),
	// read by the controller's own loader.
	cc, err := configfile.Decode[cconfig.ControllerConfiguration](chartConfigFile(t, "runplane-controller"))
	require.NoError(t, err)
	require.Equal(t, egress.EnforcementNetworkPolicy, cc.Egress.Enforcement, "testdata/values.yaml: the mode in which the controller writes policies")
	require.True(t, *cc.LeaderElection.LeaderElect, "the chart's controller elects a leader")
	cert, err := cc.Metrics.ServingCert()
	require.NoError(t, err)
	metricsPort, err := kit.FreePort("127.0.0.1")
	require.NoError(t, err)
	cfg := controllers.Config{ControllerConfiguration: *cc, RESTConfig: rec.As(env.RESTConfig(), releaseNS, "runplane-controller"),
		Logger: logr.FromSlogHandler(rec.Logger().Handler())}
	// This process's addresses and image.
	cfg.Metrics.BindAddress, cfg.HealthAddr, cfg.Image = "127.0.0.1:"+strconv.Itoa(metricsPort), "0", testImage
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- controllers.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done, "controllers.Run")
	})
	client := env.Client()
	ns := controllersNS

	t.Run("leader election", func(t *testing.T) {
		eventually(t, rec, 30*time.Second, "the Lease runplane-controller to be held", func() (bool, error) {
			l, err := client.CoordinationV1().Leases(releaseNS).Get(ctx, "runplane-controller", metav1.GetOptions{})
			return err == nil && ptr.Deref(l.Spec.HolderIdentity, "") != "", err
		})
	})

	// /metrics: the controller reviews scrapers as its chart ServiceAccount,
	// and the chart's runplane-metrics-reader lets one in.
	t.Run("metrics only for readers", func(t *testing.T) {
		scrapers, err := scrape.New(ctx, env)
		require.NoError(t, err)
		scrapers.Check(t, "https://127.0.0.1:"+strconv.Itoa(metricsPort)+"/metrics", "controller_runtime_")
		checkVerified(ctx, t, scrapers, "https://127.0.0.1:"+strconv.Itoa(metricsPort)+"/metrics", cert)
	})

	t.Run("prepare job, phase and storage gate", func(t *testing.T) {
		c := kit.Claim("data", "1Gi", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"})
		_, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, c, metav1.CreateOptions{})
		require.NoError(t, err)
		gated := mounting("gated", "data")
		gated.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: api.SchedulingGateStorage}}
		_, err = client.CoreV1().Pods(ns).Create(ctx, gated, metav1.CreateOptions{})
		require.NoError(t, err)
		eventually(t, rec, 60*time.Second, "the claim prepared", func() (bool, error) {
			p, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			st := pvcspec.StatusOf(p)
			return st.Phase == api.PhaseSucceeded, fmt.Errorf("phase %q, annotations %v", st.Phase, p.Annotations)
		})
		p, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
		require.NoError(t, err)
		job := p.Annotations[api.AnnotationPrepareJob]
		j, err := client.BatchV1().Jobs(ns).Get(ctx, job, metav1.GetOptions{})
		require.NoError(t, err, "prepare Job %q", job)
		// It runs as the namespace's default ServiceAccount, pinned, without a token.
		assert.Equal(t, "default", j.Spec.Template.Spec.ServiceAccountName, "prepare Job's ServiceAccount")
		assert.Equal(t, ptr.To(false), j.Spec.Template.Spec.AutomountServiceAccountToken, "prepare Job's token")
		eventually(t, rec, 30*time.Second, "the storage gate removed", func() (bool, error) {
			p, err := client.CoreV1().Pods(ns).Get(ctx, "gated", metav1.GetOptions{})
			return err == nil && len(p.Spec.SchedulingGates) == 0, err
		})
	})

	t.Run("accessor", func(t *testing.T) {
		_, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, kit.Claim("shared", "1Gi", nil), metav1.CreateOptions{})
		require.NoError(t, err)
		user := mounting("user", "shared")
		user.Spec.NodeName = "rbac-cpu-0"
		_, err = client.CoreV1().Pods(ns).Create(ctx, user, metav1.CreateOptions{})
		require.NoError(t, err)
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, api.AnnotationAccessor, api.AccessorEnabled)
		_, err = client.CoreV1().PersistentVolumeClaims(ns).Patch(ctx, "shared", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
		name := accessor.Name("shared")
		eventually(t, rec, 60*time.Second, "the accessor Deployment, Service and Ready phase", func() (bool, error) {
			d, err := client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if d.Spec.Template.Spec.ServiceAccountName != "default" || !ptr.Equal(d.Spec.Template.Spec.AutomountServiceAccountToken, ptr.To(false)) {
				return false, fmt.Errorf("accessor Deployment runs as %q with automountServiceAccountToken %v",
					d.Spec.Template.Spec.ServiceAccountName, d.Spec.Template.Spec.AutomountServiceAccountToken)
			}
			if _, err := client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
				return false, err
			}
			p, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "shared", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return p.Annotations[api.AnnotationAccessorPhase] == api.AccessorReady, fmt.Errorf("annotations %v", p.Annotations)
		})
	})

	t.Run("egress policy and no NATS credential copy", func(t *testing.T) {
		worker := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "worker", Labels: map[string]string{api.LabelPool: "echo", api.LabelEgress: api.EgressRestricted}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox:1.36"}}},
		}
		_, err := client.CoreV1().Pods(ns).Create(ctx, worker, metav1.CreateOptions{})
		require.NoError(t, err)
		eventually(t, rec, 30*time.Second, "the egress NetworkPolicy", func() (bool, error) {
			_, err := client.NetworkingV1().NetworkPolicies(ns).Get(ctx, egress.PolicyName, metav1.GetOptions{})
			return err == nil, err
		})
		// The policy is the controllers' answer to the Pod; no shared NATS
		// credential follows it into the namespace any more.
		_, serr := client.CoreV1().Secrets(ns).Get(ctx, api.NATSCredentialsSecret, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(serr), "a NATS credentials Secret in the tenant namespace: %v", serr)
		// The last pool Pod gone, the policy goes (delete).
		require.NoError(t, client.CoreV1().Pods(ns).Delete(ctx, "worker", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
		eventually(t, rec, 30*time.Second, "the policy removed", func() (bool, error) {
			_, perr := client.NetworkingV1().NetworkPolicies(ns).Get(ctx, egress.PolicyName, metav1.GetOptions{})
			if perr == nil {
				return false, errors.New("policy still there")
			}
			return apierrors.IsNotFound(perr), fmt.Errorf("policy: %w", perr)
		})
	})

	// A Pod of a DRA spec (as the webhook makes it) gets runplane's
	// template in its namespace (create); it goes with the Pod (delete).
	t.Run("DRA spec claim template", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "dra-trainer", Labels: map[string]string{api.LabelGPUSpec: "h100.1"}},
			Spec: corev1.PodSpec{
				SchedulerName: api.SchedulerName,
				Containers: []corev1.Container{{Name: "main", Image: "busybox:1.36",
					Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: catalog.ClaimName}}}}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: catalog.ClaimName, ResourceClaimTemplateName: ptr.To(catalog.ClaimTemplateName("h100.1"))}},
			},
		}
		_, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		eventually(t, rec, 30*time.Second, "the template runplane-h100.1", func() (bool, error) {
			_, err := client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, catalog.ClaimTemplateName("h100.1"), metav1.GetOptions{})
			return err == nil, err
		})
		require.NoError(t, client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
		eventually(t, rec, 30*time.Second, "the template removed", func() (bool, error) {
			_, err := client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, catalog.ClaimTemplateName("h100.1"), metav1.GetOptions{})
			if err == nil {
				return false, errors.New("template still there")
			}
			return apierrors.IsNotFound(err), fmt.Errorf("template: %w", err)
		})
	})

	t.Run("ssh service", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "devbox", Labels: map[string]string{api.LabelSSH: api.SSHEnabled}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox:1.36"}}},
		}
		created, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		eventually(t, rec, 30*time.Second, "the SSH Service", func() (bool, error) {
			svc, err := client.CoreV1().Services(ns).Get(ctx, sshservice.ServiceName("devbox"), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return svc.Spec.Selector[api.LabelSSHPod] == string(created.UID), fmt.Errorf("selector %v", svc.Spec.Selector)
		})
	})
}
