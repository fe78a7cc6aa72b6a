package rbac_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
)

// TestClaimTemplatesBounded: RBAC lets runplane-controller create, update
// and delete ResourceClaimTemplates cluster-wide; the chart's
// runplane-controller-claim-templates keeps it to its own (runplane-*,
// managed-by) outside kube-system and the release namespace, so a
// compromised controller cannot replace a tenant's own template (its Pods
// would get other devices) nor plant one where runplane's components run.
func TestClaimTemplatesBounded(t *testing.T) {
	install(t)
	ctx := t.Context()
	admin := env.Client()
	spec, err := catalog.ParseSpec("h100.1", "cpu: 8\nmemory: 32Gi\ndra: {}\n")
	require.NoError(t, err)
	tenants := spec.ClaimTemplate(tenantNS)
	tenants.Name, tenants.Labels = "tenant-own", nil
	_, err = admin.ResourceV1().ResourceClaimTemplates(tenantNS).Create(ctx, tenants, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, admin.ResourceV1().ResourceClaimTemplates(tenantNS).Delete(context.Background(), tenants.Name, metav1.DeleteOptions{}))
	})

	controller := as(t, "runplane-controller")
	dry := []string{metav1.DryRunAll}
	create := func(ns, name string, labels map[string]string) func() error {
		return func() error {
			tpl := spec.ClaimTemplate(ns)
			tpl.Name, tpl.Labels = name, labels
			_, err := controller.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tpl, metav1.CreateOptions{DryRun: dry})
			return err
		}
	}
	managed := map[string]string{api.LabelManagedBy: api.ManagedByController}
	const policy = "runplane-controller-claim-templates"
	tests := []struct {
		name string
		try  func() error
		rule string
	}{
		{"controller plants a template in the release namespace", create(releaseNS, "runplane-h100.1", managed), "may not create, change or delete ResourceClaimTemplates in"},
		{"controller plants a template in kube-system", create("kube-system", "runplane-h100.1", managed), "may not create, change or delete ResourceClaimTemplates in"},
		{"controller makes an unlabelled template", create(tenantNS, "runplane-h100.1", nil), "only its own ResourceClaimTemplates"},
		{"controller makes a labelled template under a tenant's name", create(tenantNS, "model-gpus", managed), "only its own ResourceClaimTemplates"},
		{"controller deletes a tenant's template", func() error {
			return controller.ResourceV1().ResourceClaimTemplates(tenantNS).Delete(ctx, tenants.Name, metav1.DeleteOptions{DryRun: dry})
		}, "only its own ResourceClaimTemplates"},
		{"controller makes its own template", create(tenantNS, "runplane-h100.1", managed), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.rule == "" {
				require.NoError(t, tt.try())
				return
			}
			refusedBy(t, tt.name, policy, tt.rule, tt.try)
		})
	}
}
