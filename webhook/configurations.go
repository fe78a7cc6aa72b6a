package webhook

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/webhook/config"
	"github.com/runplane/runplane/webhook/mutate"
)

// Paths the webhook serves admission reviews on.
const (
	MutatePodsPath   = "/mutate-pods"
	ValidatePodsPath = "/validate-pods"
	// ValidatePodClaimsPath has its own path so that a webhook of the
	// release before (whose /validate-pods admits every Pod CREATE)
	// answers 404 during the upgrade, which failurePolicy Fail refuses,
	// instead of admitting claim-naming Pods unchecked (review finding).
	ValidatePodClaimsPath = "/validate-pod-claims"
	ValidatePVCsPath      = "/validate-pvcs"
)

// DefaultConfigurationName names both the Mutating- and the
// ValidatingWebhookConfiguration.
const DefaultConfigurationName = config.DefaultConfigurationName

// ConfigHashAnnotation on a webhook configuration records the hash of the
// shape it was written with, so Run rewrites it only when the shape changes.
const ConfigHashAnnotation = api.Prefix + "config-hash"

// ConfigurationOptions shapes the webhook configuration objects.
type ConfigurationOptions struct {
	// Name of both configuration objects (default runplane-webhook).
	Name string
	// Namespace is runplane's namespace; it and kube-system are excluded.
	Namespace string
	// Exactly one of URL (a base such as https://127.0.0.1:9443, for make
	// dev and tests) and Service (the chart) says where the webhook is.
	URL     string
	Service *admissionregistrationv1.ServiceReference
	// CABundle verifies the webhook's serving certificate.
	CABundle []byte
}

// Configurations returns the webhook configuration objects: one mutating
// entry per Pod feature, each selecting only Pods carrying its label (so
// unlabelled Pods never reach the webhook and are admitted even while it is
// down), one for the storage gate selecting only Pods that mount a claim,
// one for Pods that reference runplane's credentials (CredentialsCondition);
// validating entries for claims carrying a runplane annotation, for Pods
// naming a ResourceClaim by resourceClaimName (NamesAClaimCondition) and
// for ephemeral containers. No selector exempts a Pod by a label its creator
// sets: the feature labels only opt in; the namespace selector uses
// kubernetes.io/metadata.name, which the API server sets. The
// Helm chart copies this shape; tests use it as is.
func Configurations(o ConfigurationOptions) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	if o.Name == "" {
		o.Name = DefaultConfigurationName
	}
	if o.Namespace == "" {
		o.Namespace = api.DefaultNamespace
	}
	excluded := []string{"kube-system", o.Namespace}
	slices.Sort(excluded)
	excluded = slices.Compact(excluded)
	nsSelector := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: excluded,
	}}}
	client := func(p string) admissionregistrationv1.WebhookClientConfig {
		cc := admissionregistrationv1.WebhookClientConfig{CABundle: o.CABundle}
		if o.Service != nil {
			svc := *o.Service
			svc.Path = ptr.To(p)
			if svc.Port == nil {
				svc.Port = ptr.To(int32(443))
			}
			cc.Service = &svc
		} else {
			cc.URL = ptr.To(o.URL + p)
		}
		return cc
	}
	podRules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
			Resources: []string{"pods"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}}
	mutating := func(name string, sel *metav1.LabelSelector, conds []admissionregistrationv1.MatchCondition) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:                    name,
			ClientConfig:            client(MutatePodsPath),
			Rules:                   podRules,
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       nsSelector,
			ObjectSelector:          sel,
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(int32(5)),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			MatchConditions:         conds,
		}
	}
	exists := func(key string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: metav1.LabelSelectorOpExists}}}
	}
	m := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: o.Name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			mutating(string(mutate.FeatureGPUSpec)+".runplane.io", exists(api.LabelGPUSpec), nil),
			mutating(string(mutate.FeatureStock)+".runplane.io", exists(api.LabelStock), nil),
			mutating(string(mutate.FeaturePool)+".runplane.io", exists(api.LabelPool), nil),
			mutating(string(mutate.FeatureSSH)+".runplane.io", exists(api.LabelSSH), nil),
			// No label selects the storage gate: a CEL condition sends only
			// Pods that mount a claim. runplane's own prepare and accessor
			// Pods reach it too: the webhook exempts them by the requester's
			// identity, never by a label a tenant could copy.
			mutating(string(mutate.FeatureStorageGate)+".runplane.io", &metav1.LabelSelector{},
				[]admissionregistrationv1.MatchCondition{{
					Name:       "mounts-a-claim",
					Expression: "has(object.spec.volumes) && object.spec.volumes.exists(v, has(v.persistentVolumeClaim))",
				}}),
			// Any Pod, labelled or not, that references runplane's Secrets
			// or asks for a token of runplane's NATS audience is sent, so
			// the webhook can deny every user container that would read them
			// (and check that runplane's own containers are exactly its own).
			mutating("credentials.runplane.io", &metav1.LabelSelector{},
				[]admissionregistrationv1.MatchCondition{{Name: "references-runplane-credentials", Expression: CredentialsCondition}}),
		},
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: o.Name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "pvc.runplane.io",
			ClientConfig: client(ValidatePVCsPath),
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"persistentvolumeclaims"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       nsSelector,
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(int32(5)),
			AdmissionReviewVersions: []string{"v1"},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				// The old claim too: removing the last runplane annotation
				// (a written one, say) is checked as well.
				Name: "has-runplane-annotation",
				Expression: "(has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.startsWith('" + api.Prefix + "'))) || " +
					"(oldObject != null && has(oldObject.metadata.annotations) && oldObject.metadata.annotations.exists(k, k.startsWith('" + api.Prefix + "')))",
			}},
		}, {
			// A Pod naming an existing claim by resourceClaimName, whoever
			// creates it (a Deployment's Pods too): the webhook looks the
			// claim up and refuses a GPU one. Pods naming none never reach
			// the webhook.
			Name:                    "resource-claims.runplane.io",
			ClientConfig:            client(ValidatePodClaimsPath),
			Rules:                   podRules,
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       nsSelector,
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(int32(5)),
			AdmissionReviewVersions: []string{"v1"},
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "names-a-claim", Expression: NamesAClaimCondition}},
		}, {
			// kubectl debug adds ephemeral containers through this
			// subresource: every Pod, since an ephemeral container could
			// reach what the Pod's own containers may not.
			Name:         "ephemeral-containers.runplane.io",
			ClientConfig: client(ValidatePodsPath),
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"pods/ephemeralcontainers"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			NamespaceSelector:       nsSelector,
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr.To(int32(5)),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	m.Annotations = map[string]string{ConfigHashAnnotation: shapeHash(m.Webhooks)}
	v.Annotations = map[string]string{ConfigHashAnnotation: shapeHash(v.Webhooks)}
	return m, v
}

// CredentialsCondition is the CEL condition of the credentials.runplane.io
// entry: the Pod has a volume of a Secret named runplane-* (directly or
// projected), a projected token for runplane's NATS audience, or a
// container (init, main) whose env or envFrom names such a Secret.
const CredentialsCondition = "object.spec.?volumes.orValue([]).exists(v, " +
	"v.?secret.?secretName.orValue('').startsWith('" + api.ReservedPrefix + "') || " +
	"v.?projected.?sources.orValue([]).exists(s, s.?secret.?name.orValue('').startsWith('" + api.ReservedPrefix + "') || " +
	"s.?serviceAccountToken.?audience.orValue('') == '" + api.NATSTokenAudience + "')) || " +
	"(object.spec.?containers.orValue([]) + object.spec.?initContainers.orValue([])).exists(c, " +
	"c.?env.orValue([]).exists(e, e.?valueFrom.?secretKeyRef.?name.orValue('').startsWith('" + api.ReservedPrefix + "')) || " +
	"c.?envFrom.orValue([]).exists(f, f.?secretRef.?name.orValue('').startsWith('" + api.ReservedPrefix + "')))"

// NamesAClaimCondition is the CEL condition of the
// resource-claims.runplane.io entry: the Pod names an existing
// ResourceClaim by resourceClaimName.
const NamesAClaimCondition = "object.spec.?resourceClaims.orValue([]).exists(c, c.?resourceClaimName.orValue('') != '')"

// shapeHash hashes the webhooks without their caBundle, which is patched on
// its own.
func shapeHash(webhooks any) string {
	b, _ := json.Marshal(webhooks) // plain API types always marshal
	var generic []map[string]any
	_ = json.Unmarshal(b, &generic)
	for _, w := range generic {
		if cc, ok := w["clientConfig"].(map[string]any); ok {
			delete(cc, "caBundle")
		}
	}
	b, _ = json.Marshal(generic)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
