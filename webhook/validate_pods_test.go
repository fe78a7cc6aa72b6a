package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/runplane/runplane/catalog"
)

// failingClaims stands for an API server the webhook cannot reach.
type failingClaims struct{}

func (failingClaims) GetResourceClaim(context.Context, string, string) (*resourcev1.ResourceClaim, error) {
	return nil, errors.New("connection refused")
}

// The HTTP answer of the claim check: a denial is a 403, a failed lookup a
// 500 (failurePolicy Fail keeps the Pod out), a cluster admin is exempt.
func TestValidateClaims(t *testing.T) {
	gpuClaim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "gpu-pod-gpu-x7k2q", Namespace: testNamespace},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: catalog.GPUDeviceClass}}}}}}
	classes := func() []string { return []string{catalog.GPUDeviceClass} }
	log := slog.New(slog.DiscardHandler)
	found := &podValidator{claims: fakeResourceClaims{testNamespace + "/" + gpuClaim.Name: gpuClaim}, gpuClasses: classes, log: log}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}},
		ResourceClaims: []corev1.PodResourceClaim{{Name: "dev", ResourceClaimName: ptr.To(gpuClaim.Name)}}}}
	raw, err := json.Marshal(pod)
	require.NoError(t, err)
	tests := []struct {
		name    string
		v       *podValidator
		groups  []string
		code    int32 // 0 when admitted
		outcome string
		message string
	}{
		{"a tenant naming a GPU claim", found, nil, 403, OutcomeDenied, `spec.resourceClaims[dev].resourceClaimName names ResourceClaim "gpu-pod-gpu-x7k2q"`},
		// The API's error (naming the webhook's identity) stays in its log.
		{"the lookup fails: closed", &podValidator{claims: failingClaims{}, gpuClasses: classes, log: log}, nil, 500, OutcomeError,
			"runplane webhook: the ResourceClaims this Pod names could not be checked; try again"},
		{"a cluster admin", &podValidator{claims: failingClaims{}, gpuClasses: classes, log: log}, []string{mastersGroup}, 0, OutcomeAllowed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Operation: admissionv1.Create, Namespace: testNamespace,
				UserInfo: authenticationv1.UserInfo{Username: "mallory", Groups: tt.groups}, Object: runtime.RawExtension{Raw: raw}}}
			resp, features, outcome := tt.v.validateClaims(context.Background(), req)
			assert.Equal(t, []string{"resource-claims"}, features)
			assert.Equal(t, tt.outcome, outcome)
			if tt.code == 0 {
				assert.True(t, resp.Allowed)
				return
			}
			require.False(t, resp.Allowed)
			assert.Equal(t, tt.code, resp.Result.Code)
			assert.Contains(t, resp.Result.Message, tt.message)
		})
	}
}
