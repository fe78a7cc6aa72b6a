package gate

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/eventstest"
)

func gatedPod(claims ...string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "worker", Namespace: "team"},
		Spec: corev1.PodSpec{
			SchedulingGates: []corev1.PodSchedulingGate{{Name: "other"}, {Name: api.SchedulingGateStorage}},
			Containers:      []corev1.Container{{Name: "main", Image: "busybox"}},
		},
	}
	for _, c := range claims {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return pod
}

func claim(name, phase string) *corev1.PersistentVolumeClaim {
	a := map[string]string{}
	if phase != "" {
		a[api.AnnotationPrepareFromImage] = "busybox"
		a[api.AnnotationPreparePhase] = phase
		a[api.AnnotationPrepareObservedAttempt] = "0"
		a[api.AnnotationPrepareMessage] = "exit code 3"
	}
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", Annotations: a}}
}

func TestReconcile(t *testing.T) {
	tests := []struct {
		name      string
		objects   []client.Object
		wantGated bool
		wantEvent string // "<type> <reason>", "" for none
	}{
		{"no PVC: released", []client.Object{gatedPod()}, false, "Normal StorageReady"},
		{"PVC asks for nothing: released", []client.Object{gatedPod("data"), claim("data", "")}, false, "Normal StorageReady"},
		{"PVC prepared: released", []client.Object{gatedPod("data"), claim("data", api.PhaseSucceeded)}, false, "Normal StorageReady"},
		{"PVC not prepared yet: kept", []client.Object{gatedPod("data"), claim("data", api.PhaseRunning)}, true, ""},
		{"one of two PVCs not prepared: kept", []client.Object{gatedPod("a", "b"), claim("a", api.PhaseSucceeded), claim("b", api.PhasePending)}, true, ""},
		{"PVC missing: kept", []client.Object{gatedPod("data")}, true, ""},
		{"PVC failed: kept, with a Warning naming it", []client.Object{gatedPod("data"), claim("data", api.PhaseFailed)}, true,
			"Warning StoragePrepareFailed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithObjects(tt.objects...).Build()
			rec := events.NewFakeRecorder(10)
			r := &Reconciler{Client: c, Recorder: rec}
			key := types.NamespacedName{Namespace: "team", Name: "worker"}

			_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key})
			require.NoError(t, err)

			var pod corev1.Pod
			require.NoError(t, c.Get(context.Background(), key, &pod))
			assert.Equal(t, tt.wantGated, Gated(&pod))
			assert.Equal(t, "other", pod.Spec.SchedulingGates[0].Name, "other gates are kept")
			var want []string
			if tt.wantEvent != "" {
				want = []string{tt.wantEvent}
			}
			assert.Equal(t, want, eventstest.Drain(rec))
		})
	}
}

// TestFailedNamesThePVC: the Warning says which PVC failed and why.
func TestFailedNamesThePVC(t *testing.T) {
	rec := events.NewFakeRecorder(1)
	r := &Reconciler{Client: fake.NewClientBuilder().WithObjects(gatedPod("ok", "data"), claim("ok", ""), claim("data", api.PhaseFailed)).Build(), Recorder: rec}
	_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team", Name: "worker"}})
	require.NoError(t, err)
	require.Len(t, rec.Events, 1)
	assert.Contains(t, <-rec.Events, "preparation failed for PVC data: exit code 3")
}

func TestClaims(t *testing.T) {
	pod := gatedPod("a", "b")
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	assert.Equal(t, []string{"a", "b"}, Claims(pod))
	assert.True(t, Gated(pod))
	assert.False(t, Gated(&corev1.Pod{}))
}
