package claimtemplate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/controllers/controllerstest"
	"github.com/runplane/runplane/test/cluster"
)

var env *cluster.Cluster

// waitFor and tick bound every poll of this file.
const (
	waitFor = 60 * time.Second
	tick    = 100 * time.Millisecond
)

const (
	draSpec     = "h100.2"
	draDoc      = "cpu: 4\nmemory: 16Gi\ndra:\n  count: 2\n  sameNVLinkDomain: true\n  selectors: ['device.attributes[\"gpu.nvidia.com\"].productName == \"NVIDIA H100 80GB HBM3\"']\n"
	classicSpec = "g1.1"
	classicDoc  = "gpu: 1\ncpu: 4\nmemory: 16Gi\n"
)

func TestMain(m *testing.M) {
	controllerstest.Main(m, cluster.Options{}, func(ctx context.Context, c *cluster.Cluster) error {
		env = c
		if err := c.CreateNamespace(ctx, api.DefaultNamespace); err != nil {
			return fmt.Errorf("namespace: %w", err)
		}
		// The catalog exists before the manager starts, as the chart
		// installs it; the tests change it.
		if _, err := c.Client().CoreV1().ConfigMaps(api.DefaultNamespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: api.CatalogConfigMap, Namespace: api.DefaultNamespace},
			Data:       map[string]string{draSpec: draDoc, classicSpec: classicDoc},
		}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("catalog: %w", err)
		}
		return nil
	})
}

// gpuPod is a Pod as the webhook mutates one of spec: label, claim from
// runplane-<spec>, the claim on its container. Nothing schedules it: the
// claim is generated from the template whether or not it is scheduled.
func gpuPod(ns, name, spec string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{api.LabelGPUSpec: spec}},
		Spec: corev1.PodSpec{
			SchedulerName: api.SchedulerName,
			Containers: []corev1.Container{{Name: "main", Image: "main",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: catalog.ClaimName}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: catalog.ClaimName, ResourceClaimTemplateName: ptr.To(catalog.ClaimTemplateName(spec))}},
		},
	}
}

func wantTemplate(t *testing.T, ns, name, doc string) *resourcev1.ResourceClaimTemplate {
	t.Helper()
	s, err := catalog.ParseSpec(name, doc)
	require.NoError(t, err)
	return s.ClaimTemplate(ns)
}

// waitTemplate waits for runplane's template (labels and spec) and returns it.
func waitTemplate(t *testing.T, ctx context.Context, want *resourcev1.ResourceClaimTemplate, why string) *resourcev1.ResourceClaimTemplate {
	t.Helper()
	var got *resourcev1.ResourceClaimTemplate
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		tpl, err := env.Client().ResourceV1().ResourceClaimTemplates(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		require.NoError(c, err)
		assert.Equal(c, want.Labels, tpl.Labels)
		assert.Equal(c, want.Spec, tpl.Spec)
		got = tpl
	}, waitFor, tick, "%s: ResourceClaimTemplate %s/%s", why, want.Namespace, want.Name)
	return got
}

// A Pod of a DRA spec gets a ResourceClaim generated from runplane's
// template, which runplane creates, restores when deleted or relabelled, follows through catalog changes and
// deletes with the last Pod of the spec.
func TestTemplateFollowsPodsAndCatalog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*waitFor)
	defer cancel()
	ns := "claim-templates"
	require.NoError(t, env.CreateNamespace(ctx, ns))
	templates := env.Client().ResourceV1().ResourceClaimTemplates(ns)

	pod, err := env.Client().CoreV1().Pods(ns).Create(ctx, gpuPod(ns, "trainer", draSpec), metav1.CreateOptions{})
	require.NoError(t, err)
	want := wantTemplate(t, ns, draSpec, draDoc)
	tpl := waitTemplate(t, ctx, want, "for the first Pod")

	// The resourceclaim controller generates the Pod's claim from it.
	var claimName string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := env.Client().CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		require.NoError(c, err)
		require.Len(c, p.Status.ResourceClaimStatuses, 1)
		assert.Equal(c, catalog.ClaimName, p.Status.ResourceClaimStatuses[0].Name)
		claimName = ptr.Deref(p.Status.ResourceClaimStatuses[0].ResourceClaimName, "")
		assert.NotEmpty(c, claimName)
	}, waitFor, tick, "the Pod's generated ResourceClaim")
	claim, err := env.Client().ResourceV1().ResourceClaims(ns).Get(ctx, claimName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, want.Spec.Spec, claim.Spec, "the claim is the template's")
	require.NotNil(t, metav1.GetControllerOf(claim))
	assert.Equal(t, pod.UID, metav1.GetControllerOf(claim).UID, "owned by the Pod")

	// Deleted by a tenant: created again.
	require.NoError(t, templates.Delete(ctx, tpl.Name, metav1.DeleteOptions{}))
	tpl2 := waitTemplate(t, ctx, want, "after deletion")
	assert.NotEqual(t, tpl.UID, tpl2.UID)

	// Relabelled (out of runplane's sight, as a template of a tenant's
	// under runplane's name would be): replaced.
	_, err = templates.Patch(ctx, tpl2.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":null}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	tpl3 := waitTemplate(t, ctx, want, "after relabelling")
	assert.NotEqual(t, tpl2.UID, tpl3.UID)

	// Its spec label changed: put back in place.
	_, err = templates.Patch(ctx, tpl3.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"runplane.io/gpu-spec":"g8"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	tpl4 := waitTemplate(t, ctx, want, "after changing its spec label")
	assert.Equal(t, tpl3.UID, tpl4.UID, "labels are updated in place")

	// A catalog change reaches the template (immutable: a new one).
	changed := "cpu: 4\nmemory: 16Gi\ndra:\n  count: 4\n"
	setCatalog(t, ctx, map[string]string{draSpec: changed, classicSpec: classicDoc})
	waitTemplate(t, ctx, wantTemplate(t, ns, draSpec, changed), "after the catalog change")

	// The last Pod of the spec gone: the template too.
	require.NoError(t, env.Client().CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := templates.Get(ctx, want.Name, metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(err), "template still there (err %v)", err)
	}, waitFor, tick, "the template deleted with the last Pod")
	setCatalog(t, ctx, map[string]string{draSpec: draDoc, classicSpec: classicDoc})
}

// Only DRA specs get a template; an extended-resource spec's Pod none. The
// DRA Pod created after it in the same namespace is the barrier: once its
// template is there, the earlier Pod has been reconciled too.
func TestNoTemplateForExtendedResourceSpecs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
	defer cancel()
	ns := "classic-spec"
	require.NoError(t, env.CreateNamespace(ctx, ns))
	classic := gpuPod(ns, "classic", classicSpec)
	classic.Spec.ResourceClaims, classic.Spec.Containers[0].Resources.Claims = nil, nil
	_, err := env.Client().CoreV1().Pods(ns).Create(ctx, classic, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = env.Client().CoreV1().Pods(ns).Create(ctx, gpuPod(ns, "dra", draSpec), metav1.CreateOptions{})
	require.NoError(t, err)
	waitTemplate(t, ctx, wantTemplate(t, ns, draSpec, draDoc), "the DRA Pod's")
	list, err := env.Client().ResourceV1().ResourceClaimTemplates(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list.Items, 1, "one template, the DRA spec's")
}

func setCatalog(t *testing.T, ctx context.Context, data map[string]string) {
	t.Helper()
	cms := env.Client().CoreV1().ConfigMaps(api.DefaultNamespace)
	cm, err := cms.Get(ctx, api.CatalogConfigMap, metav1.GetOptions{})
	require.NoError(t, err)
	cm.Data = data
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)
}
