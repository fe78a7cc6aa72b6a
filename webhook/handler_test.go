package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/runplane/runplane/api"
)

func TestBadRequests(t *testing.T) {
	h := NewHandler(testMutator(t), nil, nil)
	tests := []struct {
		name, path, contentType, body string
		want                          int
	}{
		{"wrong content type", MutatePodsPath, "text/plain", "{}", http.StatusUnsupportedMediaType},
		{"not JSON", MutatePodsPath, "application/json", "{", http.StatusBadRequest},
		{"no request", ValidatePVCsPath, "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, http.StatusBadRequest},
		{"unknown path", "/nope", "application/json", "{}", http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, tt.path, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.contentType)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.want, rec.Body)
			}
			if tt.want != http.StatusNotFound {
				var body map[string]string
				if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body["error"] == "" {
					t.Fatalf("want a JSON error body, got %q", rec.Body)
				}
			}
		})
	}
}

func pvcReview(t *testing.T, h http.Handler, op admissionv1.Operation, old, cur map[string]string) *admissionv1.AdmissionResponse {
	t.Helper()
	raw := func(a map[string]string) runtime.RawExtension {
		if a == nil && op == admissionv1.Create {
			return runtime.RawExtension{}
		}
		b, _ := json.Marshal(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Annotations: a}})
		return runtime.RawExtension{Raw: b}
	}
	body, _ := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"},
			Namespace: testNamespace, Operation: op, Object: raw(cur), OldObject: raw(old)},
	})
	req := httptest.NewRequest(http.MethodPost, ValidatePVCsPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("bad response %d: %s", rec.Code, rec.Body)
	}
	return out.Response
}

func TestPVCReviewsAndMetrics(t *testing.T) {
	m := NewMetrics()
	h := NewHandler(testMutator(t), m, nil)
	bad := map[string]string{api.AnnotationPrepareAttempt: "-1"}
	if r := pvcReview(t, h, admissionv1.Create, nil, bad); r.Allowed || r.Result.Code != 403 || !strings.Contains(r.Result.Message, "annotation runplane.io/prepare-attempt") {
		t.Fatalf("bad claim: %+v", r.Result)
	}
	good := map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}
	if r := pvcReview(t, h, admissionv1.Create, nil, good); !r.Allowed {
		t.Fatalf("good claim denied: %+v", r.Result)
	}
	status := map[string]string{api.AnnotationPrepareAttempt: "-1", api.AnnotationPreparePhase: api.PhaseFailed}
	if r := pvcReview(t, h, admissionv1.Update, bad, status); !r.Allowed {
		t.Fatalf("status write on an old bad claim denied: %+v", r.Result)
	}
	if got := counter(t, m.admissions.WithLabelValues("persistentvolumeclaims", "prepare", OutcomeDenied)); got != 1 {
		t.Errorf("denied claims counted %v, want 1", got)
	}
	if got := counter(t, m.admissions.WithLabelValues("persistentvolumeclaims", "prepare", OutcomeAllowed)); got != 2 {
		t.Errorf("allowed claims counted %v, want 2", got)
	}

	// Pods: one count per requested feature.
	review(t, h, podJSON(t, []byte("metadata: {name: p, labels: {runplane.io/gpu-spec: g1.1, runplane.io/pool: echo}}\nspec: {containers: [{name: m, image: i}]}")))
	review(t, h, podJSON(t, []byte("metadata: {name: p, labels: {runplane.io/gpu-spec: nope}}\nspec: {containers: [{name: m, image: i}]}")))
	for _, c := range []struct {
		feature, outcome string
		want             float64
	}{{"gpu-spec", OutcomeMutated, 1}, {"pool", OutcomeMutated, 1}, {"gpu-spec", OutcomeDenied, 1}} {
		if got := counter(t, m.admissions.WithLabelValues("pods", c.feature, c.outcome)); got != c.want {
			t.Errorf("pods %s %s = %v, want %v", c.feature, c.outcome, got, c.want)
		}
	}
	for _, r := range []string{"pods", "persistentvolumeclaims"} {
		var d dto.Metric
		if err := m.latency.WithLabelValues(r).(prometheus.Metric).Write(&d); err != nil || d.GetHistogram().GetSampleCount() == 0 {
			t.Errorf("no latency observed for %s (%v)", r, err)
		}
	}
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}
