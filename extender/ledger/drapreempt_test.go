package ledger

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// PlanPreemption: a high-priority DRA Pod short of devices (no stock, no
// free device) is nominated where evicting one lower-priority holder
// frees one; a plan again renews the nomination and evicts nobody new;
// the nomination holds the device once its holder is gone, so a Pod of
// the victim's priority (its replacement) neither fits nor preempts,
// while the nominated Pod fits there. The reservation of the nomination
// requests no device.
func TestDRAPlanPreemption(t *testing.T) {
	l := New(Options{Clock: clocktesting.NewFakePassiveClock(time.Unix(0, 0))})
	draNode(l, "a", 2)
	for i := range 2 {
		v := draPod(fmt.Sprintf("batch-%d", i), "gpu", "d1", "a")
		v.Spec.Priority = ptr.To[int32](100)
		l.UpsertPod(v)
		l.UpsertClaim(draClaim(v.Name, devID("a", i)))
	}
	hi := draPod("hi", "gpu", "d1", "")
	hi.Spec.Priority = ptr.To[int32](2000)
	l.UpsertPod(hi)
	l.UpsertClaim(draClaim("hi"))

	never := draRequest(l, hi)
	never.Preempt = false
	p, _ := l.PlanPreemption(never, []string{"a"})
	assert.Nil(t, p, "a Pod that may not preempt")

	p, capped := l.PlanPreemption(draRequest(l, hi), []string{"a"})
	require.NotNil(t, p, "capped %q", capped)
	assert.Equal(t, "a", p.Node)
	assert.Len(t, p.Victims, 1, "one device is short: one victim")
	assert.False(t, p.Renewed)
	require.Len(t, p.Evict, 1)
	node, state, ok := l.Assumed(hi.UID)
	require.True(t, ok)
	assert.Equal(t, "a", node)
	assert.Equal(t, Nominated, state)
	create, _ := l.Reservations()
	require.Len(t, create, 1)
	assert.Zero(t, create[0].Requests.Scalar[draGPU], "the reservation requests no device")
	assert.EqualValues(t, 4000, create[0].Requests.MilliCPU, "the reservation holds the Pod's CPU")

	again, _ := l.PlanPreemption(draRequest(l, hi), []string{"a"})
	require.NotNil(t, again)
	assert.True(t, again.Renewed)
	assert.Equal(t, p.Victims, again.Victims)
	assert.Empty(t, again.Evict, "no victim evicted twice")

	// The victim goes; kube-scheduler sees its claim deallocated before
	// the ledger does and runs the Pod's filter: the nomination stays,
	// waiting for the gone Pod's claim.
	victim := p.Victims[0]
	l.DeletePod(victim.UID)
	res := l.Filter(draRequest(l, hi), []string{"a"}, true)
	require.NotNil(t, res.Preemption, "the nomination lapsed: %+v", res.Failed)
	assert.Empty(t, res.Preemption.Victims)
	assert.Equal(t, 1, res.Preemption.Waiting, "the gone victim's claim")
	// Its claim goes; its replacement comes.
	l.DeleteClaim(types.UID("claim-" + victim.Name))
	repl := draPod("batch-new", "gpu", "d1", "")
	repl.Spec.Priority = ptr.To[int32](100)
	l.UpsertPod(repl)
	l.UpsertClaim(draClaim("batch-new"))
	res = l.Filter(draRequest(l, repl), []string{"a"}, true)
	assert.Empty(t, res.Feasible, "the replacement took the nominated device")
	rp, _ := l.PlanPreemption(draRequest(l, repl), []string{"a"})
	assert.Nil(t, rp, "the replacement preempts nobody of its own priority")

	none, _ := l.PlanPreemption(draRequest(l, hi), []string{"a"})
	assert.Nil(t, none, "the Pod fits: nothing to plan")
	_, state, ok = l.Assumed(hi.UID)
	require.True(t, ok, "the nomination stays")
	assert.Equal(t, Nominated, state)
	res = l.Filter(draRequest(l, hi), []string{"a"}, true)
	assert.Equal(t, "a", res.Chosen, "the Pod's filter takes its room")
	rsv, _ := l.PlanPreemption(draRequest(l, hi), []string{"a"})
	assert.Nil(t, rsv, "a reserved Pod is the scheduling cycle's")
}
