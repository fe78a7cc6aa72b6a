package activator

import (
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	a := storeActivator(t, nc, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	it := heldInvocation(t, a, js, st)
	require.NoError(t, st.Stream.DeleteMsg(ctx, 1), "another removal takes it first") //nolint:forbidigo // the other removal, not through the Store

	assert.True(t, a.removeMessages(ctx, it, true), "its only message is gone")
	assert.Zero(t, testutil.ToFloat64(a.metrics.removed.WithLabelValues("final")), "counted a removal it did not make")
}
