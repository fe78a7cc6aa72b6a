package mutate

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
)

// SSH runs inside the main container: the launcher goes in front of its
// command (args untouched), its mounts are added to it alone, nothing else
// of the user's containers changes, and a reinvocation yields the same Pod.
func TestSSHLauncherWrapsMainContainer(t *testing.T) {
	m := restrictedMutator(t)
	main := compliant("main")
	main.Command, main.Args = []string{"python", "-m", "server"}, []string{"--port", "8000"}
	main.Env = []corev1.EnvVar{{Name: "HF_HOME", Value: "/data"}}
	helper := compliant("helper")
	in := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{api.LabelSSH: api.SSHEnabled},
		Annotations: map[string]string{api.AnnotationSSHAuthorizedKeys: "keys", DefaultContainerAnnotation: "main"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{helper, main}}}
	res, err := m.Mutate(context.Background(), in, "ns")
	require.NoError(t, err)
	got := res.Pod.Spec.Containers[1]
	assert.Equal(t, append(sshLauncher(), "python", "-m", "server"), got.Command)
	assert.Equal(t, "--", got.Command[len(sshLauncher())-1], "the user's argv follows --, so none of it is read as a launcher flag")
	assert.Equal(t, main.Args, got.Args)
	assert.Equal(t, main.Env, got.Env)
	assert.Equal(t, main.SecurityContext, got.SecurityContext)
	assert.Equal(t, sshMounts(), got.VolumeMounts)
	assert.Equal(t, helper, res.Pod.Spec.Containers[0], "the other container is untouched")
	require.Len(t, res.Pod.Spec.InitContainers, 1)
	assert.Equal(t, SSHInstallContainerName, res.Pod.Spec.InitContainers[0].Name)

	again, err := m.Mutate(context.Background(), res.Pod, "ns")
	require.NoError(t, err)
	assert.Equal(t, res.Pod, again.Pod, "a reinvocation changes nothing")
}

// The SSH host key and authorized keys reach the main container only:
// another container of the Pod that mounts them is denied, on a first
// pass as on a reinvocation.
func TestSSHVolumesStayInTheMainContainer(t *testing.T) {
	m := restrictedMutator(t)
	for _, vol := range []string{VolumeSSHHostKey, VolumeSSHAuthorizedKey} {
		t.Run(vol, func(t *testing.T) {
			in := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{api.LabelSSH: api.SSHEnabled},
				Annotations: map[string]string{api.AnnotationSSHAuthorizedKeys: "keys"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{compliant("main"), compliant("thief")}}}
			res, err := m.Mutate(context.Background(), in, "ns")
			require.NoError(t, err)
			res.Pod.Spec.Containers[1].VolumeMounts = append(res.Pod.Spec.Containers[1].VolumeMounts, corev1.VolumeMount{Name: vol, MountPath: "/steal"})
			_, err = m.Mutate(context.Background(), res.Pod, "ns")
			require.Error(t, err)
			assert.Contains(t, err.Error(), `container "thief" (spec.containers[1]) may not reference runplane's credentials: it mounts volume "`+vol+`"`)
		})
	}
}
