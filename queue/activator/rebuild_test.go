package activator

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/activator/internal/state"
	"github.com/runplane/runplane/queue/pool"
)

// flakyGet is the real invocation stream whose GetMsg of seq fails once,
// as a JetStream API request that times out does.
type flakyGet struct {
	jetstream.Stream
	seq    uint64
	failed atomic.Bool
}

func (f *flakyGet) GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	if seq == f.seq && f.failed.CompareAndSwap(false, true) {
		return nil, nats.ErrTimeout
	}
	return f.Stream.GetMsg(ctx, seq, opts...)
}

// TestRebuildFailsOnATransientRead: an open invocation whose message the
// rebuild cannot read for a reason other than its absence fails the
// rebuild (run again) instead of being left out: left out, nothing would
// hold its message and the next purge would remove an accepted invocation
// (review H2).
func TestRebuildFailsOnATransientRead(t *testing.T) {
	ctx := t.Context()
	nc, js, st := realStore(t)
	inv := messages.Invocation{InvocationID: "i", Namespace: "ns", Pool: "p", AcceptedAt: time.Now()}
	b, err := json.Marshal(inv)
	require.NoError(t, err)
	pa, err := js.Publish(ctx, st.Subjects.Invoke("ns", "p"), b)
	require.NoError(t, err)
	_, err = st.Create(ctx, messages.Record{InvocationID: "i", Namespace: "ns", Pool: "p", State: messages.StateQueued,
		Sequence: pa.Sequence, AcceptedAt: inv.AcceptedAt, UpdatedAt: inv.AcceptedAt})
	require.NoError(t, err)

	flaky := *st
	flaky.Stream = &flakyGet{Stream: st.Stream, seq: pa.Sequence}
	a, err := New(Config{Store: &flaky, NC: nc, Pools: pool.Static{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	a.st, a.filtered = state.New(a.cfg.Decisions, a.cfg.Clock), map[string]bool{}
	require.ErrorIs(t, a.rebuild(ctx), nats.ErrTimeout, "the invocation's message could not be read")

	a.st = state.New(a.cfg.Decisions, a.cfg.Clock)
	require.NoError(t, a.rebuild(ctx))
	require.NotNil(t, a.st.Item(state.Key("ns", "i")), "the invocation is open after the rebuild is run again")
	a.wg.Wait()
}
