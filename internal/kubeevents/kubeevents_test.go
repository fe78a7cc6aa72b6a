package kubeevents_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/internal/kubeevents"
	"github.com/runplane/runplane/test/cluster"
)

// TestDescribeOrder: kubectl describe (the real binary, against a real
// kube-apiserver) lists runplane's Events in the order they happened among
// a core/v1 Event written the way the Deployment controller and kubelet
// write theirs. With client-go's plain events.k8s.io sink both runplane
// Events read back with a zero lastTimestamp and sort before the other.
func TestDescribeOrder(t *testing.T) {
	const ns = "events-order"
	c := cluster.ForTest(t, ns)
	ctx := t.Context()
	kube := c.Client()
	dep, err := kube.AppsV1().Deployments(ns).Create(ctx, deployment(ns, "pool"), metav1.CreateOptions{})
	require.NoError(t, err)

	rec := kubeevents.Start(ctx, kube, "runplane-test")
	rec.Eventf(dep, nil, corev1.EventTypeNormal, "First", "Scale", "runplane's first")
	first := waitEvent(ctx, t, kube, ns, "First")

	// The core Event a second after the first (timestamps have one-second
	// resolution), the second runplane Event a second after that.
	coreAt := metav1.NewTime(first.Add(time.Second))
	_, err = kube.CoreV1().Events(ns).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "pool.core", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: "Deployment", APIVersion: "apps/v1", Namespace: ns, Name: dep.Name, UID: dep.UID},
		Reason:         "Middle", Message: "the Deployment controller's", Type: corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: "deployment-controller"},
		FirstTimestamp: coreAt, LastTimestamp: coreAt, Count: 1,
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	for time.Now().Before(first.Add(2 * time.Second)) { // a barrier on the clock, not on the system under test
		time.Sleep(50 * time.Millisecond)
	}
	rec.Eventf(dep, nil, corev1.EventTypeNormal, "Last", "Scale", "runplane's last")
	waitEvent(ctx, t, kube, ns, "Last")

	out, err := exec.CommandContext(ctx, c.Binary("kubectl"), "--kubeconfig", c.Kubeconfig(), "describe", "deployment", "-n", ns, "pool").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, []string{"First", "Middle", "Last"}, describedReasons(string(out)), "kubectl describe:\n%s", out)
}

// waitEvent waits until the Event of reason is readable as core/v1 (as
// kubectl reads it) and returns the time kubectl sorts it by.
func waitEvent(ctx context.Context, t *testing.T, kube kubernetes.Interface, ns, reason string) time.Time {
	t.Helper()
	var at time.Time
	require.Eventually(t, func() bool {
		l, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason})
		if err != nil || len(l.Items) == 0 {
			return false
		}
		e := l.Items[0]
		at = e.EventTime.Time
		return true
	}, 20*time.Second, 20*time.Millisecond, "event %s not written", reason)
	return at
}

// describedReasons is the Reason column of kubectl describe's Events.
func describedReasons(out string) []string {
	_, events, _ := strings.Cut(out, "\nEvents:\n")
	var reasons []string
	for _, line := range strings.Split(events, "\n")[2:] {
		if f := strings.Fields(line); len(f) > 1 {
			reasons = append(reasons, f[1])
		}
	}
	return reasons
}

func deployment(ns, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "w", Image: "w"}}},
			},
		},
	}
}
