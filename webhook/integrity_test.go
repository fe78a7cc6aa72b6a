package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/runplane/runplane/api"
)

// runplaneSecret is a name of runplane's (runplane-*).
const runplaneSecret = "runplane-nats-credentials"

func TestRunplaneOwnPod(t *testing.T) {
	managed := map[string]string{api.LabelManagedBy: api.ManagedByController}
	tests := []struct {
		name   string
		user   authenticationv1.UserInfo
		labels map[string]string
		want   bool
	}{
		{"runplane's controller", authenticationv1.UserInfo{Username: "system:serviceaccount:runplane-system:runplane-controller"}, nil, true},
		{"a ServiceAccount of another namespace", authenticationv1.UserInfo{Username: "system:serviceaccount:team-a:runplane-controller"}, managed, false},
		{"a namespace named like a prefix", authenticationv1.UserInfo{Username: "system:serviceaccount:runplane-system-x:c"}, managed, false},
		{"a tenant with the label", authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}}, managed, false},
		{"the Job controller with the label", authenticationv1.UserInfo{Username: "system:serviceaccount:kube-system:job-controller"}, managed, true},
		{"the Job controller without it", authenticationv1.UserInfo{Username: "system:serviceaccount:kube-system:job-controller"}, nil, false},
		{"kube-controller-manager with the label", authenticationv1.UserInfo{Username: "system:kube-controller-manager"}, managed, true},
		{"a cluster admin with the label", authenticationv1.UserInfo{Username: "admin", Groups: []string{"system:masters"}}, managed, true},
		{"another value", authenticationv1.UserInfo{Username: "system:kube-controller-manager"}, map[string]string{api.LabelManagedBy: "helm"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, runplaneOwnPod("runplane-system", tt.user, tt.labels))
		})
	}
}

// ephemeralReview sends an update of pods/ephemeralcontainers adding ec to
// the worker Pod.
func ephemeralReview(t *testing.T, h http.Handler, old *corev1.Pod, ec corev1.EphemeralContainer) *admissionv1.AdmissionResponse {
	t.Helper()
	cur := old.DeepCopy()
	cur.Spec.EphemeralContainers = append(cur.Spec.EphemeralContainers, ec)
	raw := func(p *corev1.Pod) runtime.RawExtension {
		b, err := json.Marshal(p)
		require.NoError(t, err)
		return runtime.RawExtension{Raw: b}
	}
	in := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, SubResource: "ephemeralcontainers",
			Namespace: testNamespace, Operation: admissionv1.Update, UserInfo: tenant,
			Object: raw(cur), OldObject: raw(old),
		},
	}
	body, err := json.Marshal(&in)
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, ValidatePodsPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out admissionv1.AdmissionReview
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out), rec.Body.String())
	return out.Response
}

func TestEphemeralContainers(t *testing.T) {
	h := newHandler(t, nil)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "worker"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: "app:1"}},
			Volumes: []corev1.Volume{
				{Name: "runplane-nats-credentials", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: runplaneSecret}}},
				{Name: "runplane-framework-socket", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: api.NATSTokenAudience, Path: "t"}}}}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "earlier", Image: "busybox"}}},
		},
	}
	ec := func(name string, modify func(*corev1.EphemeralContainerCommon)) corev1.EphemeralContainer {
		c := corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: name, Image: "busybox"}}
		if modify != nil {
			modify(&c.EphemeralContainerCommon)
		}
		return c
	}
	tests := []struct {
		name string
		ec   corev1.EphemeralContainer
		want string // "" admitted
	}{
		{"plain", ec("dbg", nil), ""},
		{"shares the framework socket and the user's data", ec("dbg", func(c *corev1.EphemeralContainerCommon) {
			c.VolumeMounts = []corev1.VolumeMount{{Name: "runplane-framework-socket", MountPath: "/s"}, {Name: "data", MountPath: "/d"}}
		}), ""},
		{"reserved name", ec("runplane-worker", nil), `container name "runplane-worker" (spec.ephemeralContainers[1]) is reserved`},
		{"mounts the credentials volume", ec("dbg", func(c *corev1.EphemeralContainerCommon) {
			c.VolumeMounts = []corev1.VolumeMount{{Name: "runplane-nats-credentials", MountPath: "/c"}}
		}), `container "dbg" (spec.ephemeralContainers[1]) may not reference runplane's credentials: it mounts volume "runplane-nats-credentials"`},
		{"mounts a NATS audience token", ec("dbg", func(c *corev1.EphemeralContainerCommon) {
			c.VolumeMounts = []corev1.VolumeMount{{Name: "token", MountPath: "/t"}}
		}), "a projected ServiceAccount token for runplane's NATS audience nats.runplane.io"},
		{"env secretKeyRef", ec("dbg", func(c *corev1.EphemeralContainerCommon) {
			c.Env = []corev1.EnvVar{{Name: "T", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "runplane-anything"}, Key: "k"}}}}
		}), `env "T" takes valueFrom.secretKeyRef of runplane's Secret "runplane-anything"`},
		{"envFrom", ec("dbg", func(c *corev1.EphemeralContainerCommon) {
			c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: runplaneSecret}}}}
		}), "envFrom secretRef names runplane's Secret"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := ephemeralReview(t, h, pod, tt.ec)
			if tt.want == "" {
				require.True(t, resp.Allowed, "denied: %v", resp.Result)
				return
			}
			require.False(t, resp.Allowed)
			require.EqualValues(t, http.StatusForbidden, resp.Result.Code)
			require.Contains(t, resp.Result.Message, tt.want)
		})
	}
}

// Denials echo at most the start of a user's value, with its size.
func TestDenialTruncatesValues(t *testing.T) {
	h := newHandler(t, nil)
	huge := strings.Repeat("é", 100_000) // 200,000 bytes
	tests := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
	}{
		{"pool name", map[string]string{api.LabelPool: huge}, nil},
		{"ssh value", map[string]string{api.LabelSSH: huge}, nil},
		{"concurrency", map[string]string{api.LabelPool: "p"}, map[string]string{api.AnnotationConcurrency: huge}},
		{"socket path", map[string]string{api.LabelPool: "p"}, map[string]string{api.AnnotationFrameworkSocket: "/x/" + huge}},
		{"unknown spec", map[string]string{api.LabelGPUSpec: huge}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: tt.labels, Annotations: tt.annotations},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "app:1"}}}})
			require.NoError(t, err)
			resp := review(t, h, b)
			require.False(t, resp.Allowed)
			assert.Less(t, len(resp.Result.Message), MaxDenial+64, "message of %d bytes", len(resp.Result.Message))
			assert.Contains(t, resp.Result.Message, "bytes)")
		})
	}
}
