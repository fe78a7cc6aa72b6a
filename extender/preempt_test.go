package extender

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
)

// A preemption is counted "planned" once per nomination, not at every
// scheduling cycle of the waiting Pod, and each victim the extender evicts
// gets an Event naming the Pod it made room for.
func TestPreemptionCountedOnceAndVictimEvent(t *testing.T) {
	victim := pod("victim", api.LabelGPUSpec, "g1", "n")
	victim.Spec.Priority = ptr.To(int32(100))
	high := pod("high", api.LabelGPUSpec, "g1", "")
	high.Spec.Priority = ptr.To(int32(2000))
	e := testExtender(t, true, victim, high)
	rec := events.NewFakeRecorder(10)
	e.events = rec
	e.preempts = make(chan preemption, 4)
	e.ledger.UpsertNode(node("n", 1))
	e.ledger.UpsertPod(victim)

	planned := func() float64 { return testutil.ToFloat64(e.metrics.preemptions.WithLabelValues("planned")) }
	for cycle := range 3 {
		res := call(t, e.handleFilter, http.MethodPost, filterBody(t, high, "n"))
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Body.String(), "preempting 1 lower-priority Pod(s) (ns/victim)", "cycle %d", cycle)
		require.Equal(t, 1.0, planned(), "cycle %d: one nomination", cycle)
	}
	p := <-e.preempts
	require.NoError(t, e.evictPlan(t.Context(), p))
	require.Len(t, rec.Events, 1, "one Event per victim")
	require.Equal(t, "Normal Preempted Preempted by ns/high (priority 2000, this Pod's 100) to make room on n", <-rec.Events)
}
