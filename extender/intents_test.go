package extender

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender/ledger"
	"github.com/runplane/runplane/test/cluster"
)

// TestLateIntentRefused: an intent (the claim annotation the filter starts
// ahead of the bind) that reaches the API server only after the Pod changed
// — after its Binding, or after a newer intent — fails with a Conflict and
// leaves the claim the Binding (or the newer intent) recorded. A real
// kube-apiserver: the precondition is its resourceVersion check, which the
// fake clientset does not make. Before the precondition the late patch
// rewrote a bound Pod's claim to a placeholder it never took (two bound
// Pods could then name one placeholder).
func TestLateIntentRefused(t *testing.T) {
	const ns = "late-intent"
	c := cluster.ForTest(t, ns)
	ctx := t.Context()
	client := c.Client()
	phA := ledger.Placeholder{UID: "uid-a", Namespace: "stock", Name: "a", Node: "n1", Spec: "g1.1"}
	phB := ledger.Placeholder{UID: "uid-b", Namespace: "stock", Name: "b", Node: "n1", Spec: "g1.1"}

	for _, tc := range []struct {
		name string
		// change is what lands first, after the filter saw the Pod.
		change func(t *testing.T, pod *corev1.Pod)
		want   string // the Pod's claim annotation after the late intent
	}{
		{"after the Binding", func(t *testing.T, pod *corev1.Pod) {
			binding := &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod.Name, UID: pod.UID, Annotations: map[string]string{api.AnnotationClaimedStock: ""}},
				Target:     corev1.ObjectReference{Kind: "Node", Name: "n1"},
			}
			require.NoError(t, client.CoreV1().Pods(ns).Bind(ctx, binding, metav1.CreateOptions{}), "Binding")
		}, ""},
		{"after a newer intent", func(t *testing.T, pod *corev1.Pod) {
			newer := &intents{clock: clocktesting.NewFakePassiveClock(time.Now())}
			newer.record(client, pod, phB)
			require.True(t, newer.wait(ctx, pod.UID, phB), "the newer intent lands")
		}, phB.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := latePod(ctx, t, client, ns)
			seen := pod.DeepCopy() // the Pod as the filter saw it
			tc.change(t, pod)

			late := &intents{clock: clocktesting.NewFakePassiveClock(time.Now())}
			late.record(client, seen, phA)
			assert.False(t, late.wait(ctx, seen.UID, phA), "a late intent reports its claim recorded")
			late.mu.Lock()
			err := late.m[seen.UID].err
			late.mu.Unlock()
			assert.True(t, apierrors.IsConflict(err), "late intent: want a Conflict, got %v", err)

			got, err := client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, tc.want, got.Annotations[api.AnnotationClaimedStock], "claim annotation after the late intent")
		})
	}

	t.Run("on time", func(t *testing.T) {
		pod := latePod(ctx, t, client, ns)
		in := &intents{clock: clocktesting.NewFakePassiveClock(time.Now())}
		in.record(client, pod, phA)
		require.True(t, in.wait(ctx, pod.UID, phA), "an intent on the Pod as it is lands")
		got, err := client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, phA.String(), got.Annotations[api.AnnotationClaimedStock])
	})
}

// latePod creates an unbound Pod no scheduler takes.
func latePod(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) *corev1.Pod {
	t.Helper()
	pod, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "gpu-"},
		Spec: corev1.PodSpec{
			SchedulerName: "nobody",
			Containers:    []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err, "creating the Pod")
	return pod
}
