package kubeevents

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestSinkSeries: a repeated Event's series patch moves lastTimestamp and
// count too (kubectl describe shows "x3 over …" at its latest time).
func TestSinkSeries(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 28, 20, 0, 0, 0, time.UTC)
	kube := fake.NewClientset()
	s := Sink{Client: kube.CoreV1()}
	e := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "echo.1"}, EventTime: metav1.NewMicroTime(t0),
		ReportingController: "runplane-activator", ReportingInstance: "q-0", Action: "Scale", Reason: "ScaledUp",
		Regarding: corev1.ObjectReference{Kind: "Deployment", Namespace: "ns", Name: "echo"}, Note: "scaled", Type: corev1.EventTypeNormal,
	}
	created, err := s.Create(ctx, e)
	require.NoError(t, err)
	assert.Equal(t, "scaled", created.Note)

	e.Series = &eventsv1.EventSeries{Count: 3, LastObservedTime: metav1.NewMicroTime(t0.Add(time.Minute))}
	patched, err := s.Patch(ctx, e, nil)
	require.NoError(t, err)
	require.NotNil(t, patched.Series)
	assert.Equal(t, int32(3), patched.Series.Count)

	got, err := kube.CoreV1().Events("ns").Get(ctx, "echo.1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, t0, got.FirstTimestamp.UTC())
	assert.Equal(t, t0.Add(time.Minute), got.LastTimestamp.UTC())
	assert.Equal(t, int32(3), got.Count)
	assert.Equal(t, "echo", got.InvolvedObject.Name)
	assert.Equal(t, "ScaledUp", got.Reason)
}
