package sidecar

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
)

// TestAckedCountsFailures: an acknowledgement that fails is counted by
// operation, one that succeeds is not.
func TestAckedCountsFailures(t *testing.T) {
	s := &Sidecar{metrics: newMetrics(1)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s.acked(log, "ack", nil)
	s.acked(log, "ack", errors.New("nats: connection closed"))
	s.acked(log, "nak", errors.New("nats: timeout"))
	s.acked(log, "nak", errors.New("nats: timeout"))
	assert.Equal(t, 1.0, testutil.ToFloat64(s.metrics.ackErrors.WithLabelValues("ack")))
	assert.Equal(t, 2.0, testutil.ToFloat64(s.metrics.ackErrors.WithLabelValues("nak")))
	assert.Equal(t, 0.0, testutil.ToFloat64(s.metrics.ackErrors.WithLabelValues("term")))
}
