package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/webhook/mutate"
	"github.com/runplane/runplane/webhook/pvc"
)

// hooks are the admission webhooks by path: Pod mutation, Pod validation
// (v) and claim validation. controller-runtime decodes the reviews and
// encodes the answers; metrics and log may not be nil.
func hooks(m *mutate.Mutator, v *podValidator, namespace string, metrics *Metrics, log *slog.Logger) (map[string]http.Handler, error) {
	out := map[string]http.Handler{}
	for path, h := range map[string]admission.HandlerFunc{
		MutatePodsPath:        measured("pods", metrics, (&podHandler{mutator: m, namespace: namespace, log: log}).admit),
		ValidatePodsPath:      measured("pods", metrics, v.validate),
		ValidatePodClaimsPath: measured("pods", metrics, v.validateClaims),
		ValidatePVCsPath:      measured("persistentvolumeclaims", metrics, claimValidator(namespace)),
	} {
		hook, err := admission.StandaloneWebhook(&admission.Webhook{Handler: h}, admission.StandaloneOptions{Logger: logr.FromSlogHandler(log.Handler())})
		if err != nil {
			return nil, fmt.Errorf("webhook %s: %w", path, err)
		}
		out[path] = hook
	}
	return out, nil
}

// admit answers one admission request and names the features and outcome
// for the metrics.
type admit func(ctx context.Context, req admission.Request) (admission.Response, []string, string)

// measured counts every answer of fn by feature and outcome and times it.
func measured(resource string, metrics *Metrics, fn admit) admission.HandlerFunc {
	return func(ctx context.Context, req admission.Request) admission.Response {
		start := time.Now()
		resp, features, outcome := fn(ctx, req)
		for _, f := range features {
			metrics.admissions.WithLabelValues(resource, f, outcome).Inc()
		}
		metrics.latency.WithLabelValues(resource).Observe(time.Since(start).Seconds())
		return resp
	}
}

// MaxDenial bounds a denial's message, whatever it echoes.
const MaxDenial = 2048

func deny(code int32, msg string) admission.Response {
	if len(msg) > MaxDenial {
		cut := msg[:MaxDenial-64]
		for len(cut) > 0 && !utf8.ValidString(cut) {
			cut = cut[:len(cut)-1]
		}
		msg = cut + "…(" + strconv.Itoa(len(msg)) + " bytes)"
	}
	reason := metav1.StatusReasonForbidden
	if code >= 500 {
		reason = metav1.StatusReasonInternalError
	}
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg}}}
}

// requestedFeatures names the features a Pod's labels ask for, for metrics.
func requestedFeatures(labels map[string]string) []string {
	var out []string
	for _, f := range []struct {
		label   string
		feature mutate.Feature
	}{{api.LabelGPUSpec, mutate.FeatureGPUSpec}, {api.LabelStock, mutate.FeatureStock}, {api.LabelPool, mutate.FeaturePool}, {api.LabelSSH, mutate.FeatureSSH}} {
		if _, ok := labels[f.label]; ok {
			out = append(out, string(f.feature))
		}
	}
	if len(out) == 0 {
		out = []string{"none"}
	}
	return out
}

// podHandler mutates Pods with the pure mutate.Mutator.
type podHandler struct {
	mutator *mutate.Mutator
	// namespace is runplane's: its ServiceAccounts are runplane's own.
	namespace string
	log       *slog.Logger
	// patch diffs the Pod before and after; nil is Patch (BenchmarkAdmit
	// compares createPatch).
	patch func(from, to *corev1.Pod) ([]jsonpatch.Operation, error)
}

func (h *podHandler) admit(ctx context.Context, req admission.Request) (admission.Response, []string, string) {
	if req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create || req.SubResource != "" {
		return admission.Allowed(""), []string{"none"}, OutcomeUnchanged
	}
	// Every call decodes the whole Pod and recomputes the injection:
	// nothing the Pod carries (runplane.io/injected included) skips work.
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return deny(400, "runplane webhook: decoding the Pod: "+err.Error()), []string{"none"}, OutcomeError
	}
	requested := requestedFeatures(pod.Labels)
	res, err := h.mutator.MutateAdmission(ctx, &pod, mutate.Admission{
		Namespace: req.Namespace, RunplaneOwn: runplaneOwnPod(h.namespace, req.UserInfo, pod.Labels)})
	if err != nil {
		if mutate.IsDenial(err) {
			return deny(403, err.Error()), requested, OutcomeDenied
		}
		h.log.Error("mutating Pod", "namespace", req.Namespace, "name", podName(&pod), "error", err)
		return deny(500, "runplane webhook: "+err.Error()), requested, OutcomeError
	}
	features := make([]string, 0, len(res.Features))
	for _, f := range res.Features {
		features = append(features, string(f))
	}
	if len(features) == 0 {
		features = []string{"none"}
	}
	diff := Patch
	if h.patch != nil {
		diff = h.patch
	}
	patch, err := diff(&pod, res.Pod)
	if err != nil {
		return deny(500, "runplane webhook: "+err.Error()), features, OutcomeError
	}
	if len(patch) == 0 {
		return admission.Allowed(""), features, OutcomeUnchanged
	}
	h.log.Debug("mutated Pod", "namespace", req.Namespace, "name", podName(&pod), "features", features)
	return admission.Patched("", patch...), features, OutcomeMutated
}

func podName(p *corev1.Pod) string {
	if p.Name != "" {
		return p.Name
	}
	return p.GenerateName + "*"
}

// claimValidator validates claims; namespace is runplane's, whose
// ServiceAccounts may write the claims' status annotations.
func claimValidator(namespace string) admit {
	return func(ctx context.Context, req admission.Request) (admission.Response, []string, string) {
		return validatePVC(ctx, req, runplaneAccount(namespace, req.UserInfo) || slices.Contains(req.UserInfo.Groups, mastersGroup))
	}
}

func validatePVC(_ context.Context, req admission.Request, runplane bool) (admission.Response, []string, string) {
	features := []string{"prepare"}
	if req.Kind.Kind != "PersistentVolumeClaim" || req.SubResource != "" {
		return admission.Allowed(""), features, OutcomeAllowed
	}
	var claim corev1.PersistentVolumeClaim
	if err := json.Unmarshal(req.Object.Raw, &claim); err != nil {
		return deny(400, "runplane webhook: decoding the PersistentVolumeClaim: "+err.Error()), features, OutcomeError
	}
	var err error
	switch req.Operation {
	case admissionv1.Create:
		if err = pvc.ValidateKeys(nil, claim.Annotations, runplane); err == nil {
			err = pvc.ValidateCreate(&claim)
		}
	case admissionv1.Update:
		var old corev1.PersistentVolumeClaim
		if uerr := json.Unmarshal(req.OldObject.Raw, &old); uerr != nil {
			return deny(400, "runplane webhook: decoding the old PersistentVolumeClaim: "+uerr.Error()), features, OutcomeError
		}
		if err = pvc.ValidateKeys(old.Annotations, claim.Annotations, runplane); err == nil {
			err = pvc.ValidateUpdate(&old, &claim)
		}
	}
	if err != nil {
		return deny(403, err.Error()), features, OutcomeDenied
	}
	return admission.Allowed(""), features, OutcomeAllowed
}
