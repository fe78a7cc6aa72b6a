package activator

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/queue/activator/internal/state"
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

// TestFailingPurgeRoundsWarnedAndCounted: purge rounds that cannot read
// the invoke consumer's ack floor (it is not there) are counted each and
// warned once; the first round that succeeds again says so and removes
// the finished message. Each was a Debug line before, and counted nowhere.
func TestFailingPurgeRoundsWarnedAndCounted(t *testing.T) {
	ctx := t.Context()
	nc, js, st := realStore(t)
	var logs bytes.Buffer
	a := storeActivator(t, nc, st, slog.New(slog.NewTextHandler(&logs, nil)))

	// A finished invocation whose message is in the stream at 1.
	it := heldInvocation(t, a, js, st)
	a.locked(func(s *state.State) {
		s.Handled(state.Subject{Namespace: "ns", Pool: "p"}, 1)
		s.Final(it)
	})
	failures := func() float64 { return testutil.ToFloat64(a.metrics.purgeErrors.WithLabelValues("ack_floor")) }

	// A run that is stopping (its context canceled: shutdown, the Lease
	// lost) fails its requests for that reason, not the store's.
	stopping, stop := context.WithCancel(ctx)
	stop()
	a.purge(stopping)
	assert.Zero(t, failures(), "a stopping round counted")
	assert.NotContains(t, logs.String(), "level=WARN", "a stopping round warned")

	a.purge(ctx)
	a.purge(ctx)
	assert.Equal(t, 2.0, failures(), "each failed read counted")
	assert.Equal(t, 1, strings.Count(logs.String(), "level=WARN"), "warned once: %s", logs.String())
	assert.Contains(t, logs.String(), "failedRounds=1")

	// The consumer is back and has acked the message.
	ackInvoked(t, js, st, a, 1)
	logs.Reset()
	a.purge(ctx)
	assert.Equal(t, 2.0, failures())
	assert.Contains(t, logs.String(), `level=INFO msg="removing finished invocations' messages from the stream: succeeds again" failedRounds=2`)
	info, err := st.Stream.Info(ctx)
	require.NoError(t, err)
	assert.Zero(t, info.State.Msgs, "the finished message is purged")
}
