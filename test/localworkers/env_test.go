package localworkers

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
)

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

func TestPodEnv(t *testing.T) {
	local := Local{NATSURL: "nats://127.0.0.1:4222", Socket: "/tmp/x/framework.sock", SidecarHTTPAddr: "127.0.0.1:9999"}
	meta := metav1.ObjectMeta{Name: "echo-abc", Namespace: "team", UID: "u1",
		Labels: map[string]string{api.LabelPool: "echo", "app": "demo"}, Annotations: map[string]string{api.AnnotationConcurrency: "3"}}
	contract := []corev1.EnvVar{
		{Name: api.EnvPool, Value: "echo"},
		fieldEnv(api.EnvWorkerName, "metadata.name"),
		fieldEnv(api.EnvWorkerNamespace, "metadata.namespace"),
		{Name: api.EnvFrameworkSocket, Value: "/tmp/serverless-framework/framework.sock"},
		{Name: api.EnvSeedSocketPath, Value: "/tmp/serverless-framework/framework.sock"},
	}
	injected := &corev1.Pod{ObjectMeta: meta, Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: api.SidecarContainerName, Env: append(slices.Clone(contract),
			corev1.EnvVar{Name: api.EnvConcurrency, Value: "3"},
			corev1.EnvVar{Name: api.EnvNATSURL, Value: "nats://nats.runplane-system:4222"},
			corev1.EnvVar{Name: api.EnvSubjectPrefix, Value: "custom.prefix"},
			corev1.EnvVar{Name: api.EnvNATSTokenFile, Value: api.NATSTokenFile},
			corev1.EnvVar{Name: api.EnvNATSJSAPIPrefix, Value: api.WorkerJSAPIPrefix},
			corev1.EnvVar{Name: api.EnvSidecarHTTPAddr, Value: ":8091"})}},
		Containers: []corev1.Container{{Name: "app", Env: append(slices.Clone(contract),
			fieldEnv("APP_LABEL", "metadata.labels['app']"),
			corev1.EnvVar{Name: "GREETING", Value: "hi $(APP_LABEL) $$(APP_LABEL) $(NOPE)"},
			corev1.EnvVar{Name: api.EnvNATSURL, Value: "nats://leak"})}},
	}}
	bare := &corev1.Pod{ObjectMeta: meta, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}

	tests := []struct {
		name          string
		pod           *corev1.Pod
		local         Local
		wantSidecar   []string
		wantFramework []string
		absentFw      []string // variable names the framework must not get
		absentSidecar []string
	}{
		{
			name: "injected pod", pod: injected, local: local,
			wantSidecar: []string{"RUNPLANE_POOL=echo", "RUNPLANE_WORKER_NAME=echo-abc", "RUNPLANE_WORKER_NAMESPACE=team", "RUNPLANE_CONCURRENCY=3",
				"RUNPLANE_NATS_URL=nats://127.0.0.1:4222", "RUNPLANE_SUBJECT_PREFIX=custom.prefix", "RUNPLANE_FRAMEWORK_SOCKET=/tmp/x/framework.sock",
				"SERVERLESS_FRAMEWORK_SOCKET_PATH=/tmp/x/framework.sock", "RUNPLANE_SIDECAR_HTTP_ADDR=127.0.0.1:9999"},
			absentSidecar: []string{api.EnvNATSTokenFile},
			wantFramework: []string{"RUNPLANE_WORKER_NAME=echo-abc", "RUNPLANE_FRAMEWORK_SOCKET=/tmp/x/framework.sock", "APP_LABEL=demo",
				"GREETING=hi demo $(APP_LABEL) $(NOPE)"},
			absentFw: []string{api.EnvNATSURL, api.EnvNATSTokenFile, api.EnvSubjectPrefix, api.EnvSidecarHTTPAddr},
		},
		{
			name: "runplane's NATS: the worker's JetStream API prefix kept", pod: injected, local: local,
			wantSidecar: []string{api.EnvNATSJSAPIPrefix + "=" + api.WorkerJSAPIPrefix},
			absentFw:    []string{api.EnvNATSJSAPIPrefix},
		},
		{
			name: "a NATS without accounts: the plain JetStream API", pod: injected,
			local:         Local{NATSURL: "nats://l", Socket: "/s", SidecarHTTPAddr: "127.0.0.1:1", PlainJetStream: true},
			absentSidecar: []string{api.EnvNATSJSAPIPrefix},
		},
		{
			name: "token file replaced", pod: injected, local: Local{NATSURL: "nats://l", NATSTokenFile: "/local/token", Socket: "/s", SidecarHTTPAddr: "127.0.0.1:1"},
			wantSidecar: []string{"RUNPLANE_NATS_TOKEN_FILE=/local/token"},
			absentFw:    []string{api.EnvNATSTokenFile},
		},
		{
			name: "not injected: synthesized from labels and annotations", pod: bare, local: local,
			wantSidecar: []string{"RUNPLANE_POOL=echo", "RUNPLANE_WORKER_NAME=echo-abc", "RUNPLANE_WORKER_NAMESPACE=team", "RUNPLANE_CONCURRENCY=3",
				"RUNPLANE_NATS_URL=nats://127.0.0.1:4222", "RUNPLANE_FRAMEWORK_SOCKET=/tmp/x/framework.sock"},
			wantFramework: []string{"RUNPLANE_POOL=echo", "RUNPLANE_FRAMEWORK_SOCKET=/tmp/x/framework.sock"},
			absentFw:      []string{api.EnvNATSURL},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, fw, err := PodEnv(tt.pod, tt.local)
			require.NoError(t, err)
			for _, w := range tt.wantSidecar {
				assert.True(t, slices.Contains(sc, w), "sidecar env lacks %s: %v", w, sc)
			}
			for _, w := range tt.wantFramework {
				assert.True(t, slices.Contains(fw, w), "framework env lacks %s: %v", w, fw)
			}
			for _, k := range tt.absentFw {
				for _, kv := range fw {
					if strings.HasPrefix(kv, k+"=") {
						t.Errorf("framework env has %s", kv)
					}
				}
			}
			for _, k := range tt.absentSidecar {
				for _, kv := range sc {
					if strings.HasPrefix(kv, k+"=") {
						t.Errorf("sidecar env has %s", kv)
					}
				}
			}
		})
	}
}

func TestPodEnvUnsupportedField(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{api.LabelPool: "x"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Env: []corev1.EnvVar{fieldEnv("X", "status.podIPs")}}}}}
	_, _, err := PodEnv(pod, Local{})
	assert.ErrorContains(t, err, `env X: field path "status.podIPs"`)
}
