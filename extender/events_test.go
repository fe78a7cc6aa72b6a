package extender

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/events"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/runplane/runplane/api"
)

// A bound GPU Pod gets one Event saying how it got its node, naming the
// placeholder it took (and nothing else: one write per bind).
func TestBindRecordsEvents(t *testing.T) {
	tests := []struct {
		name  string
		stock bool
		want  []string
	}{
		{"free capacity", false, []string{"Normal Bound Bound to free capacity on n"}},
		{"takeover", true, []string{"Normal TookStock TookStock ns/ph on n (label runplane.io/stock=g1; the placeholder was deleted)"}},
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
			var got []string
			for range tt.want {
				got = append(got, <-rec.Events)
			}
			assert.Equal(t, tt.want, got)
			assert.Empty(t, rec.Events, "no other Event")
		})
	}
}
