package queue

import (
	"context"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRetryJetStream: a queue that starts while the servers enable
// RUNPLANE's JetStream again (its account just pushed) meets "no
// responders" once and opens on the next try; one whose context ends says
// what it last met.
func TestRetryJetStream(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	calls := 0
	err := retryJetStream(t.Context(), log, "the bucket", func(context.Context) error {
		calls++
		if calls == 1 {
			return nats.ErrNoResponders
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, 2, calls)

	ctx, cancel := context.WithCancel(t.Context())
	err = retryJetStream(ctx, log, "the bucket", func(context.Context) error {
		cancel()
		return nats.ErrNoResponders
	})
	require.ErrorIs(t, err, nats.ErrNoResponders)
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "open the bucket")
}
