package mutate

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
)

func TestQuote(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"short", "abc", `"abc"`},
		{"exactly the bound", strings.Repeat("a", MaxEcho), `"` + strings.Repeat("a", MaxEcho) + `"`},
		{"long", strings.Repeat("a", 200_000), `"` + strings.Repeat("a", MaxEcho) + `"…(200000 bytes)`},
		{"cut on a character boundary", "a" + strings.Repeat("é", 100), `"a` + strings.Repeat("é", 49) + `"…(201 bytes)`},
		{"control characters escaped", "a\nb", `"a\nb"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Quote(tt.in)
			assert.Equal(t, tt.want, got)
			assert.True(t, utf8.ValidString(got))
		})
	}
}

// A second pass accepts runplane's own sidecars with the API token mount the
// ServiceAccount admission plugin adds, and nothing else.
func TestReinvocationKeepsOnlyTheTokenMount(t *testing.T) {
	cat, err := catalog.Parse(map[string]string{"g1.1": "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\n"})
	require.NoError(t, err)
	m := &Mutator{
		Config:          Config{Image: "runplane:v1", PauseImage: "pause:3.10", NATSURL: "nats://n:4222", SubjectPrefix: "p", StreamName: "S"},
		Catalog:         func() catalog.Catalog { return cat },
		PVCs:            noPVCs{},
		PriorityClasses: staticPCs{},
	}
	in := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "w", Labels: map[string]string{api.LabelPool: "echo"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "app:1"}}},
	}
	first, err := m.Mutate(context.Background(), in, "ns")
	require.NoError(t, err)
	tokenVolume := func(name string, src corev1.VolumeSource) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: src}
	}
	saProjected := corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
		{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}},
		{DownwardAPI: &corev1.DownwardAPIProjection{}},
	}}}
	tests := []struct {
		name   string
		volume corev1.Volume
		mount  corev1.VolumeMount
		ok     bool
	}{
		{"the ServiceAccount plugin's mount", tokenVolume("kube-api-access-abcde", saProjected),
			corev1.VolumeMount{Name: "kube-api-access-abcde", MountPath: api.ServiceAccountTokenMountPath, ReadOnly: true}, true},
		{"a claim named like it", tokenVolume("kube-api-access-abcde", corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}),
			corev1.VolumeMount{Name: "kube-api-access-abcde", MountPath: api.ServiceAccountTokenMountPath, ReadOnly: true}, false},
		{"the token elsewhere", tokenVolume("kube-api-access-abcde", saProjected),
			corev1.VolumeMount{Name: "kube-api-access-abcde", MountPath: "/var/run/runplane/nats", ReadOnly: true}, false},
		{"a user volume", tokenVolume("data", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}),
			corev1.VolumeMount{Name: "data", MountPath: "/data"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := first.Pod.DeepCopy()
			pod.Spec.Volumes = append(pod.Spec.Volumes, tt.volume)
			sc := &pod.Spec.InitContainers[0]
			require.Equal(t, api.SidecarContainerName, sc.Name)
			sc.VolumeMounts = append(sc.VolumeMounts, tt.mount)
			res, err := m.Mutate(context.Background(), pod, "ns")
			if !tt.ok {
				var reserved *ReservedError
				require.ErrorAs(t, err, &reserved)
				assert.Equal(t, api.SidecarContainerName, reserved.Name)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, pod, res.Pod, "a second pass changed the Pod")
		})
	}
}
