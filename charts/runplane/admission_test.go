package chart_test

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/webhook"
)

// TestAdmissionTemplatesRenderGo: the admission templates hack/admgen
// generates (TestChartTemplatesAreGenerated) render, for the chart's
// values, what webhook.Configurations and webhook.Policies build for the
// same settings: the values the chart fills in (namespace, excluded
// namespaces, GPU resources, tiers, tier grantors, any characters in them)
// land where the Go definitions put them.
func TestAdmissionTemplatesRenderGo(t *testing.T) {
	needHelm(t)
	gpu := webhook.DefaultGPUPolicy() // the default values: priorityClasses.tiers' names
	gpu.WorkloadPriorityClasses = []string{"runplane-workload-high", "runplane-batch"}
	for _, tc := range []struct {
		name string
		args []string
		opts webhook.PolicyOptions
	}{
		{"default", nil, webhook.PolicyOptions{GPU: gpu}},
		{"without gpu", []string{"--set", "admissionPolicies.gpu.enabled=false"}, webhook.PolicyOptions{}},
		{"odd values", []string{"--set-json", `admissionPolicies.priorityTiers.grantorGroups=["it's","back\\slash","quo\"te"]`,
			"--set-json", `webhook.excludeNamespaces=["zz","aa"]`, "--set-json", `priorityClasses.tiers=[]`,
			"--set-json", `admissionPolicies.gpu.resourcePrefixes=[]`, "--set-json", `admissionPolicies.gpu.resources=["b.com/x","a.com/y"]`,
			// The DRA specs' classes join the value's: a MIG profile's default, a named one.
			"--set-json", `admissionPolicies.gpu.deviceClasses=["z.example.com"]`,
			"--set-json", `catalog.specs={"mig.1":{"cpu":"1","memory":"1Gi","dra":{"migProfile":"1g.10gb"}},"x.1":{"cpu":"1","memory":"1Gi","dra":{"deviceClassName":"x.example.com"}}}`},
			webhook.PolicyOptions{ExcludeNamespaces: []string{"zz", "aa"}, TierGrantorGroups: []string{"it's", `back\slash`, `quo"te`},
				GPU: &webhook.GPUPolicy{Resources: []string{"b.com/x", "a.com/y", "nvidia.com/gpu"},
					DeviceClasses: []string{"z.example.com", "mig.nvidia.com", "x.example.com"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := parse(t, mustRender(t, append(tc.args, "--show-only", "templates/webhook/configurations.yaml", "--show-only", "templates/webhook/policies.yaml")...))
			tc.opts.Namespace = releaseNamespace
			policies, bindings := webhook.Policies(tc.opts)
			require.Len(t, objs, 2+len(policies)+len(bindings), "the configurations, %d policies and their bindings", len(policies))
			for _, p := range policies {
				var got admissionregistrationv1.ValidatingAdmissionPolicy
				find(t, objs, "ValidatingAdmissionPolicy", p.Name).into(t, &got)
				assert.True(t, apiequality.Semantic.DeepEqual(got.Spec, p.Spec), "%s:\nchart:\n%s\ngo:\n%s", p.Name, toYAML(got.Spec), toYAML(p.Spec))
			}
			for _, b := range bindings {
				var got admissionregistrationv1.ValidatingAdmissionPolicyBinding
				find(t, objs, "ValidatingAdmissionPolicyBinding", b.Name).into(t, &got)
				assert.True(t, apiequality.Semantic.DeepEqual(got.Spec, b.Spec), "%s:\nchart:\n%s\ngo:\n%s", b.Name, toYAML(got.Spec), toYAML(b.Spec))
			}
			if len(tc.opts.ExcludeNamespaces) > 0 {
				return // webhook.Configurations excludes only kube-system and runplane's namespace
			}
			m, v := webhook.Configurations(webhook.ConfigurationOptions{Namespace: releaseNamespace,
				Service: &admissionregistrationv1.ServiceReference{Namespace: releaseNamespace, Name: "runplane-webhook"}})
			var gotM admissionregistrationv1.MutatingWebhookConfiguration
			var gotV admissionregistrationv1.ValidatingWebhookConfiguration
			find(t, objs, "MutatingWebhookConfiguration", m.Name).into(t, &gotM)
			find(t, objs, "ValidatingWebhookConfiguration", v.Name).into(t, &gotV)
			assert.True(t, apiequality.Semantic.DeepEqual(gotM.Webhooks, m.Webhooks), "mutating:\nchart:\n%s\ngo:\n%s", toYAML(gotM.Webhooks), toYAML(m.Webhooks))
			assert.True(t, apiequality.Semantic.DeepEqual(gotV.Webhooks, v.Webhooks), "validating:\nchart:\n%s\ngo:\n%s", toYAML(gotV.Webhooks), toYAML(v.Webhooks))
		})
	}
}
