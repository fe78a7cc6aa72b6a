package activator

import (
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/activator/internal/state"
	"github.com/runplane/runplane/queue/pool"
)

// TestRemovingAMessageAlreadyGone: a final invocation whose message
// another removal took first (a purge round, the sweep, a leader before
// this one) has its messages gone, and its namespace's share of the
// stream can be given back; the removal is not counted as this one's.
// Before, every delete of a gone message was a failure (nats.go never
// reports it as jetstream.ErrMsgNotFound): the share stayed counted until
// a sweep, and the sweep itself stopped at the first such message
// (TestSweepRemovesLeftovers failed that way at load).
func TestRemovingAMessageAlreadyGone(t *testing.T) {
	ctx := t.Context()
	nc, js, st := realStore(t)
	a, err := New(Config{Store: st, NC: nc, Pools: pool.Static{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	a.st = state.New(a.cfg.Decisions, a.cfg.Clock)

	_, err = js.Publish(ctx, st.Subjects.Invoke("ns", "p"), []byte("{}"))
	require.NoError(t, err)
	it := &state.Item{Inv: messages.Invocation{InvocationID: "a", Namespace: "ns", Pool: "p"}, Seq: 1}
	a.locked(func(s *state.State) {
		s.Accept(it.Inv, 1)
		require.True(t, s.Enqueue(it))
	})
	require.NoError(t, st.Stream.DeleteMsg(ctx, 1), "another removal takes it first")

	assert.True(t, a.removeMessages(ctx, it, true), "its only message is gone")
	assert.Zero(t, testutil.ToFloat64(a.metrics.removed.WithLabelValues("final")), "counted a removal it did not make")
}
