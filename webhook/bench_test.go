package webhook

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// BenchmarkAdmit measures one admission review through the handler,
// in-process (decode, mutate, patch, encode; no TLS or network), and
// reports p50/p99 latency and admissions per second. Goal: p99 <= 1 ms.
// Each case runs the patch from jsonpatch.CreatePatch on the whole Pods
// ("library") and from the field-wise differ Patch the webhook serves with
// ("baseline"); see Patch for why.
//
//	go test ./webhook -run '^$' -bench BenchmarkAdmit -benchtime 2000x
func BenchmarkAdmit(b *testing.B) {
	for _, tc := range []struct{ name, file string }{
		{"gpu", "testdata/pods/gpu.in.yaml"},
		{"all-features", "testdata/pods/gpu-pool-ssh-storage.in.yaml"},
		{"reinvocation", "testdata/pods/gpu-pool-ssh-storage.out.yaml"},
		{"denied", "testdata/pods/deny-gpu-unknown-spec.in.yaml"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			raw, err := os.ReadFile(tc.file)
			require.NoError(b, err)
			body, err := json.Marshal(&admissionv1.AdmissionReview{
				TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
				Request: &admissionv1.AdmissionRequest{
					UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: testNamespace,
					Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: podJSON(b, raw)},
				},
			})
			require.NoError(b, err)
			for _, path := range []struct {
				name  string
				patch func(from, to *corev1.Pod) ([]jsonpatch.Operation, error)
			}{{"library", createPatch}, {"baseline", Patch}} {
				pods := &podHandler{mutator: testMutator(b), log: slog.New(slog.DiscardHandler), patch: path.patch}
				h := &admission.Webhook{Handler: measured("pods", NewMetrics(), pods.admit)}
				b.Run(path.name, func(b *testing.B) { benchAdmit(b, h, body) })
			}
		})
	}
}

func benchAdmit(b *testing.B, h http.Handler, body []byte) {
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		req := httptest.NewRequest(http.MethodPost, MutatePodsPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		lat = append(lat, time.Since(t0))
		require.Equal(b, http.StatusOK, rec.Code)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "admissions/s")
}
