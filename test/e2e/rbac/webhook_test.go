package rbac_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/internal/pki"
	"github.com/runplane/runplane/test/e2e/rbac"
	"github.com/runplane/runplane/test/kit"
	"github.com/runplane/runplane/test/scrape"
	"github.com/runplane/runplane/webhook"
	wconfig "github.com/runplane/runplane/webhook/config"
)

const webhookSecret = "runplane-webhook-tls"

// pointAt rewrites the chart's two webhook configurations (as the cluster
// admin) to call addr instead of the webhook Service, which has no running
// Pod here, and clears their caBundle: the webhook must put it back.
func pointAt(t *testing.T, addr string) {
	t.Helper()
	ctx := t.Context()
	adm := env.Client().AdmissionregistrationV1()
	url := func(cc *admissionregistrationv1.WebhookClientConfig) {
		require.True(t, cc.Service != nil && cc.Service.Path != nil, "chart's webhook client config %+v has no Service path", cc)
		*cc = admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + addr + *cc.Service.Path)}
	}
	m, err := adm.MutatingWebhookConfigurations().Get(ctx, webhook.DefaultConfigurationName, metav1.GetOptions{})
	require.NoError(t, err)
	for i := range m.Webhooks {
		url(&m.Webhooks[i].ClientConfig)
	}
	_, err = adm.MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{})
	require.NoError(t, err)
	v, err := adm.ValidatingWebhookConfigurations().Get(ctx, webhook.DefaultConfigurationName, metav1.GetOptions{})
	require.NoError(t, err)
	for i := range v.Webhooks {
		url(&v.Webhooks[i].ClientConfig)
	}
	_, err = adm.ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// runWebhook runs the webhook as runplane-webhook, the way the chart runs
// it (it keeps its TLS Secret and only patches the caBundle of the chart's
// configurations), until the returned stop is called.
func runWebhook(t *testing.T, rec *rbac.Recorder, ln net.Listener, dnsNames []string) (stop func()) {
	t.Helper()
	// The chart's settings (the ConfigMap runplane-webhook, read by the
	// webhook's own loader); sidecars verify NATS, so the webhook follows
	// the CA ConfigMap (as runplane-webhook: get, list and watch by name).
	wc, err := configfile.Decode[wconfig.WebhookConfiguration](chartConfigFile(t, "runplane-webhook"))
	require.NoError(t, err)
	require.Equal(t, webhookSecret, wc.TLS.SecretName, "the chart's tls.secretName")
	require.False(t, wc.Webhooks.Manage, "the chart owns the webhook configurations")
	cfg := webhook.Config{WebhookConfiguration: *wc, RESTConfig: rec.As(env.RESTConfig(), releaseNS, "runplane-webhook"), Listener: ln, Logger: rec.Logger()}
	// This process's addresses, image and NATS.
	cfg.HealthAddr, cfg.TLS.IPAddresses, cfg.TLS.DNSNames = "0", []string{"127.0.0.1"}, dnsNames
	cfg.Injection.Image, cfg.Injection.NATSURL = testImage, "nats://runplane-nats."+releaseNS+".svc:4222"
	cfg.Webhooks.Resync.Duration = time.Second
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- webhook.Run(ctx, cfg) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			assert.NoError(t, <-done, "webhook.Run")
		})
	}
}

// caBundles returns the caBundle of every entry of both configurations.
func caBundles(ctx context.Context) ([][]byte, error) {
	adm := env.Client().AdmissionregistrationV1()
	m, err := adm.MutatingWebhookConfigurations().Get(ctx, webhook.DefaultConfigurationName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	v, err := adm.ValidatingWebhookConfigurations().Get(ctx, webhook.DefaultConfigurationName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, w := range m.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	for _, w := range v.Webhooks {
		out = append(out, w.ClientConfig.CABundle)
	}
	return out, nil
}

// TestWebhook: as runplane-webhook, the webhook creates and later updates
// its TLS Secret, patches the caBundle into the chart's configurations,
// and admits through the real API server: a GPU Pod gets the catalog's
// resources and the PriorityClass's value, a Pod's claims are looked up for
// the storage gate, and a claim's annotations are validated.
func TestWebhook(t *testing.T) {
	install(t)
	rec := &rbac.Recorder{}
	t.Cleanup(func() { checkNoDenials(t, "runplane-webhook", rec) })
	ctx := t.Context()
	client := env.Client()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	pointAt(t, addr)
	stop := runWebhook(t, rec, ln, nil)
	t.Cleanup(func() { stop() }) // stop is replaced on restart

	secretCA := func() []byte {
		s, err := client.CoreV1().Secrets(releaseNS).Get(ctx, webhookSecret, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return s.Data[pki.KeyCABundle]
	}
	waitTrusted := func(t *testing.T) {
		t.Helper()
		eventually(t, rec, 30*time.Second, "the TLS Secret and the caBundle in every webhook entry", func() (bool, error) {
			ca := secretCA()
			bundles, err := caBundles(ctx)
			if err != nil || len(ca) == 0 {
				return false, err
			}
			for _, b := range bundles {
				if !bytes.Equal(b, ca) {
					return false, nil
				}
			}
			return true, nil
		})
	}

	t.Run("tls secret and caBundle", waitTrusted)

	t.Run("gpu pod gets the catalog spec and priority", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu", Labels: map[string]string{api.LabelGPUSpec: "g1.1"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox:1.36"}}},
		}
		got, err := client.CoreV1().Pods(webhookNS).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(t, err)
		gpu := got.Spec.Containers[0].Resources.Limits[api.DefaultGPUResource]
		// Mutated from the catalog and the PriorityClass.
		assert.Equal(t, "1", gpu.String())
		assert.Equal(t, api.SchedulerName, got.Spec.SchedulerName)
		assert.Equal(t, api.PriorityClassWorkload, got.Spec.PriorityClassName)
		assert.Equal(t, int32(1000), ptr.Deref(got.Spec.Priority, 0))
	})

	// /metrics on the HTTPS port (after an admission: its series exist): the
	// webhook reviews scrapers as its chart ServiceAccount, and the chart's
	// runplane-metrics-reader lets one in.
	t.Run("metrics only for readers", func(t *testing.T) {
		scrapers, err := scrape.New(ctx, env)
		require.NoError(t, err)
		scrapers.Check(t, "https://"+addr+"/metrics", "runplane_webhook_admissions_total")
	})

	t.Run("claims are read for the storage gate and validated", func(t *testing.T) {
		for _, c := range []*corev1.PersistentVolumeClaim{
			kit.Claim("plain", "1Gi", nil),
			kit.Claim("prepared", "1Gi", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}),
		} {
			_, err := client.CoreV1().PersistentVolumeClaims(webhookNS).Create(ctx, c, metav1.CreateOptions{})
			require.NoError(t, err, "claim %s", c.Name)
		}
		for _, c := range []struct {
			claim string
			gated bool
		}{{"plain", false}, {"prepared", true}} {
			// The webhook's claim informer may lag the create by a moment;
			// a claim it cannot find counts as unprepared.
			eventually(t, rec, 10*time.Second, "the storage gate decision for "+c.claim, func() (bool, error) {
				got, err := client.CoreV1().Pods(webhookNS).Create(ctx, mounting("m-"+c.claim, c.claim), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				if err != nil {
					return false, err
				}
				return (len(got.Spec.SchedulingGates) > 0) == c.gated, nil
			})
		}
	})

	// A Pod naming a ResourceClaim by resourceClaimName: the webhook reads
	// the claim live as runplane-webhook (get, no list or watch) and
	// refuses a GPU one; a tenant's Pod, since cluster admins are exempt.
	t.Run("a named ResourceClaim is read live", func(t *testing.T) {
		for name, class := range map[string]string{"gpu-claim": catalog.GPUDeviceClass, "nic-claim": "nic.example.com"} {
			_, err := client.ResourceV1().ResourceClaims(webhookNS).Create(ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "dev",
					Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}}},
				metav1.CreateOptions{})
			require.NoError(t, err, "claim %s", name)
		}
		_, err := client.RbacV1().RoleBindings(webhookNS).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant-edit"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "tenant"}}}, metav1.CreateOptions{})
		require.NoError(t, err)
		// The authorizer sees the binding a moment after it is made.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			r, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: "tenant", ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: webhookNS, Verb: "create", Resource: "pods"}}}, metav1.CreateOptions{})
			require.NoError(c, err)
			assert.True(c, r.Status.Allowed, "the tenant may create Pods")
		}, 10*time.Second, 100*time.Millisecond)
		cfg := env.RESTConfig()
		cfg.Impersonate.UserName = "tenant"
		tenant, err := kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		naming := func(claim string) *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "with-" + claim}, Spec: corev1.PodSpec{
				ResourceClaims: []corev1.PodResourceClaim{{Name: "dev", ResourceClaimName: ptr.To(claim)}},
				Containers:     []corev1.Container{{Name: "main", Image: "busybox:1.36", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "dev"}}}}}}}
		}
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		_, err = tenant.CoreV1().Pods(webhookNS).Create(ctx, naming("nic-claim"), dry)
		require.NoError(t, err, "a Pod naming a claim of another class")
		_, err = tenant.CoreV1().Pods(webhookNS).Create(ctx, naming("gpu-claim"), dry)
		require.Error(t, err, "a Pod naming a GPU claim admitted")
		assert.Contains(t, err.Error(), `admission webhook "resource-claims.runplane.io" denied the request: spec.resourceClaims[dev].resourceClaimName names ResourceClaim "gpu-claim"`)
	})

	t.Run("restart renews the certificate in its Secret", func(t *testing.T) {
		before, err := client.CoreV1().Secrets(releaseNS).Get(ctx, webhookSecret, metav1.GetOptions{})
		require.NoError(t, err)
		stop()
		ln, err := net.Listen("tcp", addr)
		require.NoError(t, err)
		// A name the old certificate does not cover: the Secret is updated.
		stop = runWebhook(t, rec, ln, []string{"runplane-webhook." + releaseNS + ".svc"})
		eventually(t, rec, 30*time.Second, "the TLS Secret updated with a new certificate", func() (bool, error) {
			s, err := client.CoreV1().Secrets(releaseNS).Get(ctx, webhookSecret, metav1.GetOptions{})
			return err == nil && !bytes.Equal(s.Data["tls.crt"], before.Data["tls.crt"]), err
		})
		waitTrusted(t)
	})
}
