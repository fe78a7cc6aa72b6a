package activator

import (
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/internal/kubeevents"
	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/test/cluster"
)

// TestPoolConditionOnTheAPIServer: on a real kube-apiserver with the
// Deployment controller running, the RunplanePool condition means "the
// last scaling decision was applied": it stays True (lastTransitionTime
// unchanged) when the pool scales to zero, turns False with ScaleFailed
// when a decision cannot be applied, survives the Deployment controller's
// own status writes, and kubectl describe shows it. Before, it flipped to
// False on every scale to zero and a failure left it untouched.
func TestPoolConditionOnTheAPIServer(t *testing.T) {
	const ns = "pool-condition"
	c := cluster.ForTest(t, ns)
	ctx := t.Context()
	kube := c.Client()
	labels := map[string]string{"app": "echo"}
	dep, err := kube.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "echo"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "w", Image: "w"}}}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	t0 := time.Date(2026, 11, 28, 20, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	a := &Activator{cfg: Config{Kube: kube, Clock: clk, Logger: slog.New(slog.DiscardHandler)}}
	rec := kubeevents.Start(ctx, kube, "runplane-activator")
	pl := pool.Pool{Namespace: ns, Name: "echo", Deployment: "echo", DeploymentUID: dep.UID}

	steps := []struct {
		name           string
		do             func()
		status         corev1.ConditionStatus
		reason         string
		lastTransition time.Time
	}{
		{"from zero", func() { a.reportScale(ctx, rec, pl, scaleReport{from: 0, to: 1, reason: "backlog 1"}) },
			corev1.ConditionTrue, ReasonScaledFromZero, t0},
		{"to zero keeps True and its transition time", func() { a.reportScale(ctx, rec, pl, scaleReport{from: 1, to: 0, reason: "idle"}) },
			corev1.ConditionTrue, ReasonScaledDown, t0},
		{"a failed decision is False", func() {
			a.reportScaleFailed(ctx, rec, pl, scaleReport{from: 0, to: 1, reason: "backlog 1"}, errors.New("deployments.apps \"echo\" is forbidden"))
		}, corev1.ConditionFalse, ReasonScaleFailed, t0.Add(2 * time.Minute)},
	}
	for i, s := range steps {
		clk.SetTime(t0.Add(time.Duration(i) * time.Minute))
		s.do()
		got := poolCondition(ctx, t, kube, ns)
		assert.Equal(t, s.status, got.Status, s.name)
		assert.Equal(t, s.reason, got.Reason, s.name)
		assert.Equal(t, s.lastTransition, got.LastTransitionTime.UTC(), s.name)
		assert.Equal(t, clk.Now(), got.LastUpdateTime.UTC(), s.name)
	}

	// The Deployment controller writes its own conditions on a scale; ours stays.
	_, err = kube.AppsV1().Deployments(ns).UpdateScale(ctx, "echo", &autoscalingv1.Scale{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "echo"}, Spec: autoscalingv1.ScaleSpec{Replicas: 1}}, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, "echo", metav1.GetOptions{})
		return err == nil && d.Status.ObservedGeneration == d.Generation && d.Status.Replicas == 1
	}, 30*time.Second, 50*time.Millisecond, "the Deployment controller did not scale")
	got := poolCondition(ctx, t, kube, ns)
	assert.Equal(t, corev1.ConditionFalse, got.Status, "the pool condition after the Deployment controller's write")

	require.Eventually(t, func() bool { // the broadcaster writes asynchronously
		l, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "source=runplane-activator"})
		return err == nil && len(l.Items) == 3
	}, 20*time.Second, 20*time.Millisecond, "the activator's 3 Events")
	out, err := exec.CommandContext(ctx, c.Binary("kubectl"), "--kubeconfig", c.Kubeconfig(), "describe", "deployment", "-n", ns, "echo").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Regexp(t, `RunplanePool\s+False\s+ScaleFailed`, string(out))
	_, events, _ := strings.Cut(string(out), "\nEvents:\n")
	assert.Regexp(t, `(?s)ScaledFromZero.*ScaledDown.*ScaleFailed`, events, "the Events in order")
}

func poolCondition(ctx context.Context, t *testing.T, kube kubernetes.Interface, ns string) appsv1.DeploymentCondition {
	t.Helper()
	d, err := kube.AppsV1().Deployments(ns).Get(ctx, "echo", metav1.GetOptions{})
	require.NoError(t, err)
	for _, c := range d.Status.Conditions {
		if c.Type == PoolConditionType {
			return c
		}
	}
	require.FailNow(t, "no RunplanePool condition", "%+v", d.Status.Conditions)
	return appsv1.DeploymentCondition{}
}
