package activator

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/runplane/runplane/queue/pool"
)

// Every applied scaling decision is an Event on the pool's Deployment with
// its reason, and the pool condition in the Deployment's status says the
// same, next to the Deployment controller's own conditions.
func TestReportScale(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 20, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		from, to   int
		wantReason string
		wantStatus corev1.ConditionStatus
	}{
		{"from zero", 0, 1, ReasonScaledFromZero, corev1.ConditionTrue},
		{"up", 1, 3, ReasonScaledUp, corev1.ConditionTrue},
		{"down", 3, 2, ReasonScaledDown, corev1.ConditionTrue},
		{"to zero: a pool at zero is a healthy pool", 1, 0, ReasonScaledDown, corev1.ConditionTrue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "echo", UID: "u1"},
				Status: appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue}}}}
			kube := fake.NewClientset(dep)
			a := &Activator{cfg: Config{Kube: kube, Clock: clocktesting.NewFakeClock(t0), Logger: slog.New(slog.DiscardHandler)}}
			rec := events.NewFakeRecorder(4)
			pl := pool.Pool{Namespace: "ns", Name: "echo", Deployment: "echo", DeploymentUID: "u1"}
			a.reportScale(context.Background(), rec, pl, scaleReport{from: tt.from, to: tt.to, reason: "backlog 2", backlog: 2, inflight: 1})
			msg := "pool echo scaled from " + itoa(tt.from) + " to " + itoa(tt.to) + " replicas: backlog 2 (backlog 2, in flight 1)"
			assert.Equal(t, "Normal "+tt.wantReason+" "+msg, <-rec.Events)
			got, err := kube.AppsV1().Deployments("ns").Get(context.Background(), "echo", metav1.GetOptions{})
			require.NoError(t, err)
			require.Len(t, got.Status.Conditions, 2, "the Deployment's own condition stays")
			var c appsv1.DeploymentCondition
			for _, have := range got.Status.Conditions {
				if have.Type == PoolConditionType {
					c = have
				}
			}
			assert.Equal(t, tt.wantStatus, c.Status)
			assert.Equal(t, tt.wantReason, c.Reason)
			assert.Equal(t, msg, c.Message)
			assert.Equal(t, t0, c.LastUpdateTime.UTC())
		})
	}
}

func itoa(n int) string { return string(rune('0' + n)) }
