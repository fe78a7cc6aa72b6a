package activator

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/natsauth"
)

// TestFailureReport: a failing round is warned at once, then at most once
// a minute while rounds keep failing, and its end is told once.
func TestFailureReport(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := failureReport{what: "purge", every: time.Minute}
	t0 := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		at   time.Duration
		err  error
		want string // the line logged, "" for none
	}{
		{name: "success: nothing", at: 0, want: ""},
		{name: "first failure: warned", at: time.Second, err: boom, want: `level=WARN msg="purge: fails" failedRounds=1 err=boom`},
		{name: "again soon: quiet", at: 2 * time.Second, err: boom, want: ""},
		{name: "still within the minute: quiet", at: 60 * time.Second, err: boom, want: ""},
		{name: "a minute on: warned with the count", at: 61 * time.Second, err: boom, want: `level=WARN msg="purge: fails" failedRounds=4 err=boom`},
		{name: "success: told once", at: 62 * time.Second, want: `level=INFO msg="purge: succeeds again" failedRounds=4`},
		{name: "success again: nothing", at: 63 * time.Second, want: ""},
		{name: "a new failure: warned at once", at: 64 * time.Second, err: boom, want: `level=WARN msg="purge: fails" failedRounds=1 err=boom`},
	} {
		buf.Reset()
		r.round(log, t0.Add(tc.at), tc.err)
		line := strings.TrimSpace(buf.String())
		if tc.want == "" {
			assert.Empty(t, line, tc.name)
			continue
		}
		_, rest, _ := strings.Cut(line, " ") // time=…
		assert.Equal(t, tc.want, rest, tc.name)
	}
}

// TestAckFloorReadFailureCounted: an ack floor that cannot be read (here:
// no invoke consumer) is an error of the round and counted, not only a
// Debug line as before.
func TestAckFloorReadFailureCounted(t *testing.T) {
	ctx := t.Context()
	nc := natsauth.Connect(t, natsauth.JetStream(t, nil).ClientURL())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := stream.Open(ctx, js, stream.Config{})
	require.NoError(t, err)
	a, err := New(Config{Store: st, NC: nc, Pools: pool.Static{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	require.Zero(t, testutil.ToFloat64(a.metrics.purgeErrors.WithLabelValues("ack_floor")))
	floor, _, err := a.invokeAckFloor(ctx)
	require.Error(t, err)
	assert.Zero(t, floor, "nothing on an invoke subject is purged without it")
	assert.Equal(t, 1.0, testutil.ToFloat64(a.metrics.purgeErrors.WithLabelValues("ack_floor")))
}
