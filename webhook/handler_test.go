package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/runplane/runplane/api"
)

// TestBadRequests: what is not an admission review is answered by
// controller-runtime with an errored review (code 400), or 404 off the
// admission paths.
func TestBadRequests(t *testing.T) {
	h := newHandler(t, nil)
	tests := []struct {
		name, path, contentType, body string
		want                          int32
	}{
		{"wrong content type", MutatePodsPath, "text/plain", "{}", http.StatusBadRequest},
		{"not JSON", MutatePodsPath, "application/json", "{", http.StatusBadRequest},
		{"unknown path", "/nope", "application/json", "{}", http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, tt.path, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", tt.contentType)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if tt.want == http.StatusNotFound {
				require.Equal(t, http.StatusNotFound, rec.Code)
				return
			}
			var out admissionv1.AdmissionReview
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
			require.NotNil(t, out.Response)
			require.False(t, out.Response.Allowed)
			require.Equal(t, tt.want, out.Response.Result.Code, out.Response.Result.Message)
		})
	}
}

// controllerAccount is runplane's controller in the handler tests.
var controllerAccount = authenticationv1.UserInfo{Username: "system:serviceaccount:" + runplaneNamespace + ":runplane-controller"}

func pvcReviewAs(t *testing.T, h http.Handler, user authenticationv1.UserInfo, op admissionv1.Operation, old, cur map[string]string) *admissionv1.AdmissionResponse {
	t.Helper()
	raw := func(a map[string]string) runtime.RawExtension {
		if a == nil && op == admissionv1.Create {
			return runtime.RawExtension{}
		}
		b, err := json.Marshal(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Annotations: a}})
		require.NoError(t, err)
		return runtime.RawExtension{Raw: b}
	}
	body, err := json.Marshal(&admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"},
			Namespace: testNamespace, Operation: op, UserInfo: user, Object: raw(cur), OldObject: raw(old)},
	})
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, ValidatePVCsPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out admissionv1.AdmissionReview
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), "status %d: %s", rec.Code, rec.Body)
	require.NotNil(t, out.Response, rec.Body.String())
	return out.Response
}

func TestPVCReviewsAndMetrics(t *testing.T) {
	m := NewMetrics()
	h := newHandler(t, m)
	bad := map[string]string{api.AnnotationPrepareAttempt: "-1"}
	good := map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}
	status := map[string]string{api.AnnotationPrepareAttempt: "-1", api.AnnotationPreparePhase: api.PhaseFailed}
	for _, tc := range []struct {
		name     string
		user     authenticationv1.UserInfo
		op       admissionv1.Operation
		old, cur map[string]string
		allowed  bool
		message  string
	}{
		{"bad claim", tenant, admissionv1.Create, nil, bad, false, "annotation runplane.io/prepare-attempt"},
		{"good claim", tenant, admissionv1.Create, nil, good, true, ""},
		{"status write on an old bad claim", controllerAccount, admissionv1.Update, bad, status, true, ""},
		{"status write by the user", tenant, admissionv1.Update, bad, status, false, "annotation runplane.io/prepare-phase: written by runplane"},
		{"a typo'd key", tenant, admissionv1.Create, nil, map[string]string{"runplane.io/prepare-from-imag": "busybox"}, false, "annotation runplane.io/prepare-from-imag: unknown runplane annotation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := pvcReviewAs(t, h, tc.user, tc.op, tc.old, tc.cur)
			require.Equal(t, tc.allowed, r.Allowed, "%+v", r.Result)
			if !tc.allowed {
				require.EqualValues(t, http.StatusForbidden, r.Result.Code)
				require.Contains(t, r.Result.Message, tc.message)
			}
		})
	}
	require.Equal(t, 3.0, counter(t, m.admissions.WithLabelValues("persistentvolumeclaims", "prepare", OutcomeDenied)), "denied claims")
	require.Equal(t, 2.0, counter(t, m.admissions.WithLabelValues("persistentvolumeclaims", "prepare", OutcomeAllowed)), "allowed claims")

	// Pods: one count per requested feature.
	review(t, h, podJSON(t, []byte("metadata: {name: p, labels: {runplane.io/gpu-spec: g1.1, runplane.io/pool: echo}}\nspec: {containers: [{name: m, image: i}]}")))
	review(t, h, podJSON(t, []byte("metadata: {name: p, labels: {runplane.io/gpu-spec: nope}}\nspec: {containers: [{name: m, image: i}]}")))
	for _, c := range []struct {
		feature, outcome string
		want             float64
	}{{"gpu-spec", OutcomeMutated, 1}, {"pool", OutcomeMutated, 1}, {"gpu-spec", OutcomeDenied, 1}} {
		require.Equal(t, c.want, counter(t, m.admissions.WithLabelValues("pods", c.feature, c.outcome)), "pods %s %s", c.feature, c.outcome)
	}
	for _, r := range []string{"pods", "persistentvolumeclaims"} {
		var d dto.Metric
		require.NoError(t, m.latency.WithLabelValues(r).(prometheus.Metric).Write(&d))
		require.NotZero(t, d.GetHistogram().GetSampleCount(), "no latency observed for %s", r)
	}
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var d dto.Metric
	require.NoError(t, c.Write(&d))
	return d.GetCounter().GetValue()
}

// TestMetricsBuildInfo: the webhook serves runplane_build_info like every binary.
func TestMetricsBuildInfo(t *testing.T) {
	_, err := NewMetrics().registered()
	require.NoError(t, err)
	n, err := testutil.GatherAndCount(ctrlmetrics.Registry, "runplane_build_info")
	require.NoError(t, err)
	require.Equal(t, 1, n)
}
