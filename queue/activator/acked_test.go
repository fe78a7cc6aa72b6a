package activator

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

type msg struct{ jetstream.Msg }

func (msg) Subject() string { return "runtime.serverless.invoke.p" }

// TestAckedCountsFailures: a failed Ack, Nak or Term is counted per
// consumer and operation; a successful one is not.
func TestAckedCountsFailures(t *testing.T) {
	a := &Activator{cfg: Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, metrics: newMetrics(prometheus.NewRegistry())}
	tests := []struct {
		consumer, op string
		err          error
		want         float64
	}{
		{"invoke", "ack", nil, 0},
		{"invoke", "ack", errors.New("nats: connection closed"), 1},
		{"results", "nak", jetstream.ErrMsgAlreadyAckd, 1},
		{"results", "term", errors.New("timeout"), 1},
	}
	for _, tc := range tests {
		a.acked(tc.consumer, tc.op, msg{}, tc.err)
		var m dto.Metric
		require.NoError(t, a.metrics.ackErrors.WithLabelValues(tc.consumer, tc.op).Write(&m))
		require.Equal(t, tc.want, m.GetCounter().GetValue(), "%s %s", tc.consumer, tc.op)
	}
}
