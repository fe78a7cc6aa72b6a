package extender

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/runplane/runplane/api"
)

// A bind writes what it must and records no Event: the scheduler's
// Scheduled Event says where the Pod went, the Binding's claim annotation
// what it took (an Event per bound Pod was one write in seven of a
// takeover, BindThroughput).
func TestBindWritesNoEvent(t *testing.T) {
	tests := []struct {
		name   string
		stock  bool
		writes []string
	}{
		{"free capacity", false, []string{"create pods/binding"}},
		// The claim annotation (no filter ran, so the bind writes it), the
		// placeholder's delete, the Binding.
		{"takeover", true, []string{"patch pods", "delete pods", "create pods/binding"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ph := pod("ph", api.LabelStock, "g1", "n")
			e := testExtender(t, true, pod("x", api.LabelGPUSpec, "g1", ""), ph)
			rec := events.NewFakeRecorder(10)
			e.events = rec
			if tt.stock {
				e.ledger.UpsertNode(node("n", 1))
				e.ledger.UpsertPod(ph)
			} else {
				e.ledger.UpsertNode(node("n", 2))
			}
			res := call(t, e.handleBind, http.MethodPost, `{"PodName":"x","PodNamespace":"ns","PodUID":"x","Node":"n"}`)
			require.Equal(t, http.StatusOK, res.Code)
			var out extenderv1.ExtenderBindingResult
			require.NoError(t, json.Unmarshal(res.Body.Bytes(), &out))
			require.Empty(t, out.Error)
			var writes []string
			for _, a := range e.client.(*fake.Clientset).Actions() {
				if a.GetVerb() == "get" || a.GetVerb() == "list" || a.GetVerb() == "watch" {
					continue
				}
				w := a.GetVerb() + " " + a.GetResource().Resource
				if a.GetSubresource() != "" {
					w += "/" + a.GetSubresource()
				}
				writes = append(writes, w)
			}
			assert.Equal(t, tt.writes, writes)
			// FakeRecorder records synchronously: an Event would be here.
			assert.Empty(t, rec.Events, "no Event")
		})
	}
}
