package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/webhook/mutate"
	"github.com/runplane/runplane/webhook/pvc"
)

// maxReviewBytes bounds a request body; the API server limits objects to
// ~3 MiB, so a larger body is not an admission review.
const maxReviewBytes = 8 << 20

// Handler answers admission reviews: Pod mutation on MutatePodsPath and
// claim validation on ValidatePVCsPath.
type Handler struct {
	mutator *mutate.Mutator
	metrics *Metrics
	log     *slog.Logger
	mux     *http.ServeMux
}

// NewHandler serves the admission paths with m. metrics and log may be nil.
func NewHandler(m *mutate.Mutator, metrics *Metrics, log *slog.Logger) *Handler {
	if metrics == nil {
		metrics = NewMetrics()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{mutator: m, metrics: metrics, log: log, mux: http.NewServeMux()}
	h.mux.HandleFunc("POST "+MutatePodsPath, h.review("pods", h.mutatePod))
	h.mux.HandleFunc("POST "+ValidatePVCsPath, h.review("persistentvolumeclaims", h.validatePVC))
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// admit answers one admission request and names the features and outcome
// for the metrics.
type admit func(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, []string, string)

func (h *Handler) review(resource string, fn admit) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
			h.fail(w, resource, http.StatusUnsupportedMediaType, fmt.Sprintf("content type %q: an admission review must be application/json", r.Header.Get("Content-Type")))
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
		if err != nil {
			h.fail(w, resource, http.StatusBadRequest, "reading the request body: "+err.Error())
			return
		}
		if len(body) > maxReviewBytes {
			h.fail(w, resource, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", maxReviewBytes))
			return
		}
		var in admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &in); err != nil {
			h.fail(w, resource, http.StatusBadRequest, "decoding the admission review: "+err.Error())
			return
		}
		if in.Request == nil {
			h.fail(w, resource, http.StatusBadRequest, "the admission review has no request")
			return
		}
		resp, features, outcome := fn(r.Context(), in.Request)
		resp.UID = in.Request.UID
		out := admissionv1.AdmissionReview{TypeMeta: in.TypeMeta, Response: resp}
		if out.APIVersion == "" {
			out.APIVersion, out.Kind = "admission.k8s.io/v1", "AdmissionReview"
		}
		b, err := json.Marshal(&out)
		if err != nil {
			h.fail(w, resource, http.StatusInternalServerError, "encoding the admission review: "+err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
		for _, f := range features {
			h.metrics.admissions.WithLabelValues(resource, f, outcome).Inc()
		}
		h.metrics.latency.WithLabelValues(resource).Observe(time.Since(start).Seconds())
	}
}

// fail answers a request that is not a usable admission review with a 4xx
// or 5xx and a JSON error body.
func (h *Handler) fail(w http.ResponseWriter, resource string, code int, msg string) {
	h.log.Warn("bad admission request", "resource", resource, "status", code, "error", msg)
	h.metrics.admissions.WithLabelValues(resource, "none", OutcomeError).Inc()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func deny(code int32, msg string) *admissionv1.AdmissionResponse {
	reason := metav1.StatusReasonForbidden
	if code >= 500 {
		reason = metav1.StatusReasonInternalError
	}
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg}}
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

// injectedKey is how the injected annotation's key appears in a Pod's JSON.
var injectedKey = []byte(`"` + api.AnnotationInjected + `"`)

func (h *Handler) mutatePod(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, []string, string) {
	if req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create || req.SubResource != "" {
		return &admissionv1.AdmissionResponse{Allowed: true}, []string{"none"}, OutcomeUnchanged
	}
	// Reinvocations are the common case once a Pod was mutated: reading
	// only the metadata is enough to see that, and far cheaper than
	// decoding the whole Pod.
	var meta struct {
		Metadata struct {
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	// Only a Pod that carries the injected annotation can be a
	// reinvocation; a first admission skips this extra pass over the body.
	if bytes.Contains(req.Object.Raw, injectedKey) && json.Unmarshal(req.Object.Raw, &meta) == nil && h.mutator.AlreadyInjected(meta.Metadata.Labels, meta.Metadata.Annotations) {
		return &admissionv1.AdmissionResponse{Allowed: true}, requestedFeatures(meta.Metadata.Labels), OutcomeUnchanged
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return deny(400, "runplane webhook: decoding the Pod: "+err.Error()), []string{"none"}, OutcomeError
	}
	requested := requestedFeatures(pod.Labels)
	res, err := h.mutator.Mutate(ctx, &pod, req.Namespace)
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
	if res.Unchanged {
		return &admissionv1.AdmissionResponse{Allowed: true}, features, OutcomeUnchanged
	}
	patch, err := Patch(&pod, res.Pod)
	if err != nil {
		return deny(500, "runplane webhook: "+err.Error()), features, OutcomeError
	}
	if patch == nil {
		return &admissionv1.AdmissionResponse{Allowed: true}, features, OutcomeUnchanged
	}
	pt := admissionv1.PatchTypeJSONPatch
	h.log.Debug("mutated Pod", "namespace", req.Namespace, "name", podName(&pod), "features", features)
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt}, features, OutcomeMutated
}

func podName(p *corev1.Pod) string {
	if p.Name != "" {
		return p.Name
	}
	return p.GenerateName + "*"
}

func (h *Handler) validatePVC(_ context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, []string, string) {
	features := []string{"prepare"}
	if req.Kind.Kind != "PersistentVolumeClaim" || req.SubResource != "" {
		return &admissionv1.AdmissionResponse{Allowed: true}, features, OutcomeAllowed
	}
	var claim corev1.PersistentVolumeClaim
	if err := json.Unmarshal(req.Object.Raw, &claim); err != nil {
		return deny(400, "runplane webhook: decoding the PersistentVolumeClaim: "+err.Error()), features, OutcomeError
	}
	var err error
	switch req.Operation {
	case admissionv1.Create:
		err = pvc.ValidateCreate(&claim)
	case admissionv1.Update:
		var old corev1.PersistentVolumeClaim
		if uerr := json.Unmarshal(req.OldObject.Raw, &old); uerr != nil {
			return deny(400, "runplane webhook: decoding the old PersistentVolumeClaim: "+uerr.Error()), features, OutcomeError
		}
		err = pvc.ValidateUpdate(&old, &claim)
	}
	if err != nil {
		return deny(403, err.Error()), features, OutcomeDenied
	}
	return &admissionv1.AdmissionResponse{Allowed: true}, features, OutcomeAllowed
}
