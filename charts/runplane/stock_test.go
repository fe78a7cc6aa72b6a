package chart_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/webhook/mutate"
)

// renderedPriorityClasses answers the webhook's PriorityClass reads from
// the classes the chart renders (pure lookup: the test compares shapes).
type renderedPriorityClasses map[string]*schedulingv1.PriorityClass

func (r renderedPriorityClasses) GetPriorityClass(_ context.Context, name string) (*schedulingv1.PriorityClass, error) {
	return r[name], nil
}

// TestStockPlaceholdersMirrorWebhook: every stock pool's placeholder is
// rendered in the shape the webhook gives it (one source: the webhook's
// mutation of the rendered template changes nothing), and a MIG spec's
// placeholder (gpu: 0, resources: nvidia.com/mig-1g.10gb) holds its MIG
// slice and no nvidia.com/gpu — a placeholder built from `gpu` alone would
// hold nothing a MIG GPU Pod can take.
func TestStockPlaceholdersMirrorWebhook(t *testing.T) {
	needHelm(t)
	objs := parse(t, mustRender(t, "--values", "testdata/values-full.yaml"))
	var cm corev1.ConfigMap
	find(t, objs, "ConfigMap", api.CatalogConfigMap).into(t, &cm)
	cat, err := catalog.Parse(cm.Data)
	require.NoError(t, err, "catalog.Parse")
	classes := renderedPriorityClasses{}
	var pause string
	for _, o := range objs {
		switch {
		case o.kind() == "PriorityClass":
			var pc schedulingv1.PriorityClass
			o.into(t, &pc)
			classes[pc.Name] = &pc
		}
	}
	pause = webhookConfig(t, objs).Injection.PauseImage
	require.NotEmpty(t, pause, "the webhook's injection.pauseImage")
	m := &mutate.Mutator{
		Config:          mutate.Config{PauseImage: pause},
		Catalog:         func() catalog.Catalog { return cat },
		PriorityClasses: classes,
	}
	seen := map[string]bool{}
	for _, o := range objs {
		if o.kind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		o.into(t, &d)
		if _, ok := d.Spec.Template.Labels[api.LabelStock]; !ok {
			continue
		}
		specName := d.Spec.Template.Labels[api.LabelStock]
		seen[specName] = true
		t.Run(specName, func(t *testing.T) {
			spec, err := cat.Lookup(api.LabelStock, specName)
			require.NoError(t, err, "spec %q in the rendered catalog", specName)
			pod := &corev1.Pod{ObjectMeta: d.Spec.Template.ObjectMeta, Spec: d.Spec.Template.Spec}
			pod.Namespace = d.Namespace
			res, err := m.Mutate(context.Background(), pod.DeepCopy(), d.Namespace)
			require.NoError(t, err, "webhook mutation of the rendered placeholder")
			got := pod.Spec.Containers[0].Resources
			want := res.Pod.Spec.Containers[0].Resources
			assert.True(t, apiequality.Semantic.DeepEqual(want, got), "placeholder resources: chart %v, webhook %v", got, want)
			assert.True(t, apiequality.Semantic.DeepEqual(spec.Resources(), got.Requests), "placeholder requests %v, spec %v", got.Requests, spec.Resources())
			for _, f := range []struct {
				name      string
				got, want any
			}{
				{"schedulerName", pod.Spec.SchedulerName, res.Pod.Spec.SchedulerName},
				{"priorityClassName", pod.Spec.PriorityClassName, res.Pod.Spec.PriorityClassName},
				{"terminationGracePeriodSeconds", pod.Spec.TerminationGracePeriodSeconds, res.Pod.Spec.TerminationGracePeriodSeconds},
				{"automountServiceAccountToken", pod.Spec.AutomountServiceAccountToken, res.Pod.Spec.AutomountServiceAccountToken},
				{"nodeSelector", pod.Spec.NodeSelector, res.Pod.Spec.NodeSelector},
				{"tolerations", pod.Spec.Tolerations, res.Pod.Spec.Tolerations},
				{"image", pod.Spec.Containers[0].Image, res.Pod.Spec.Containers[0].Image},
				{"resourceClaims", pod.Spec.ResourceClaims, res.Pod.Spec.ResourceClaims},
			} {
				assert.True(t, apiequality.Semantic.DeepEqual(f.want, f.got), "%s: chart %v, webhook %v", f.name, f.got, f.want)
			}
			if spec.GPU == 0 {
				_, hasGPU := got.Requests[spec.GPUResource]
				assert.False(t, hasGPU, "a gpu: 0 spec's placeholder requests %s", spec.GPUResource)
			}
		})
	}
	require.True(t, seen["mig.1g"], "values-full has a MIG stock pool (mig.1g); pools seen: %v", seen)
	// A DRA spec's placeholder holds its claim from runplane's template, no
	// extended resource: on a node managed through DRA it would never fit.
	require.True(t, seen["h100.dra2"], "values-full has a DRA stock pool (h100.dra2); pools seen: %v", seen)
	var dra appsv1.Deployment
	find(t, objs, "Deployment", "runplane-stock-h100-dra2").into(t, &dra)
	tpl := dra.Spec.Template.Spec
	require.Len(t, tpl.ResourceClaims, 1)
	assert.Equal(t, catalog.ClaimName, tpl.ResourceClaims[0].Name)
	assert.Equal(t, "runplane-h100.dra2", ptrDeref(tpl.ResourceClaims[0].ResourceClaimTemplateName))
	assert.Equal(t, []corev1.ResourceClaim{{Name: catalog.ClaimName}}, tpl.Containers[0].Resources.Claims)
	assert.NotContains(t, tpl.Containers[0].Resources.Requests, corev1.ResourceName(api.DefaultGPUResource), "DRA placeholder requests no nvidia.com/gpu")
	mig := find(t, objs, "Deployment", "runplane-stock-mig-1g")
	var d appsv1.Deployment
	mig.into(t, &d)
	req := d.Spec.Template.Spec.Containers[0].Resources.Requests
	assert.Equal(t, "1", ptrString(req, "nvidia.com/mig-1g.10gb"), "MIG placeholder's MIG slice")
	assert.NotContains(t, req, corev1.ResourceName(api.DefaultGPUResource), "MIG placeholder holds no whole GPU")
}

// TestDRAStockPerTenantNamespace: a DRA spec's pool renders its
// placeholders in each of its tenant namespaces (with the stock
// NetworkPolicy and PodDisruptionBudget there), the webhook admits DRA
// placeholders there (injection.draStockNamespaces) and any spec's in
// stock.namespace only; and a spec of `dra: {}` (every default) is a DRA
// spec too: its placeholder holds a claim, not nothing.
func TestDRAStockPerTenantNamespace(t *testing.T) {
	needHelm(t)
	objs := parse(t, mustRender(t, "--set-json", `catalog.specs={"d1":{"cpu":"4","memory":"16Gi","dra":{}}}`,
		"--set-json", `stock.pools=[{"spec":"d1","replicas":2,"namespaces":["team-a","team-b"]}]`))
	placeholders := map[string]appsv1.Deployment{}
	policies := map[string][]string{}
	for _, o := range objs {
		switch o.kind() {
		case "Deployment":
			var d appsv1.Deployment
			o.into(t, &d)
			if d.Spec.Template.Labels[api.LabelStock] != "" {
				placeholders[d.Namespace] = d
			}
		case "NetworkPolicy", "PodDisruptionBudget":
			if o.name() == "runplane-stock" {
				var m struct {
					Metadata struct{ Namespace string } `json:"metadata"`
				}
				o.into(t, &m)
				policies[o.kind()] = append(policies[o.kind()], m.Metadata.Namespace)
			}
		}
	}
	require.ElementsMatch(t, []string{"team-a", "team-b"}, slices.Collect(maps.Keys(placeholders)), "the DRA pool's Deployments, one per tenant namespace")
	for ns, d := range placeholders {
		assert.Equal(t, "runplane-stock-d1", d.Name, ns)
		assert.Equal(t, int32(2), *d.Spec.Replicas, ns)
		tpl := d.Spec.Template.Spec
		require.Len(t, tpl.ResourceClaims, 1, "%s: the placeholder of a dra: {} spec holds a claim", ns)
		assert.Equal(t, "runplane-d1", ptrDeref(tpl.ResourceClaims[0].ResourceClaimTemplateName), ns)
		assert.Equal(t, []corev1.ResourceClaim{{Name: catalog.ClaimName}}, tpl.Containers[0].Resources.Claims, ns)
	}
	for _, kind := range []string{"NetworkPolicy", "PodDisruptionBudget"} {
		assert.ElementsMatch(t, []string{api.DefaultStockNamespace, "team-a", "team-b"}, policies[kind], kind)
	}
	injection := webhookConfig(t, objs).Injection
	assert.Equal(t, []string{api.DefaultStockNamespace}, injection.StockNamespaces)
	assert.Equal(t, []string{"team-a", "team-b"}, injection.DRAStockNamespaces)
}

func ptrDeref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func ptrString(l corev1.ResourceList, name corev1.ResourceName) string {
	q, ok := l[name]
	if !ok {
		return ""
	}
	return q.String()
}
