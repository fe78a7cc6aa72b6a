package chaos_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/test/chaos"
)

// built holds the binaries, built once by the first case that needs them
// (the pure tests need none).
var built struct {
	once sync.Once
	dir  string
	bins chaos.Binaries
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// binaries builds the programs a case runs (once per test binary).
func binaries(t *testing.T) chaos.Binaries {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "chaos-bin")
		if built.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		built.bins, built.err = chaos.Build(ctx, built.dir)
	})
	require.NoError(t, built.err)
	return built.bins
}

// full says whether the full cases run (make chaos sets
// RUNPLANE_CHAOS=full); otherwise only the short versions of a few cases
// run, so make test exercises the harness in seconds.
func full() bool { return os.Getenv("RUNPLANE_CHAOS") == "full" }

// pick returns the full or the short value.
func pick[T any](fullV, shortV T) T {
	if full() {
		return fullV
	}
	return shortV
}

// fullOnly skips a case outside make chaos.
func fullOnly(t *testing.T) {
	t.Helper()
	if !full() {
		t.Skip("a full chaos case: run with make chaos (RUNPLANE_CHAOS=full)")
	}
}

// report appends the case's row to the table make chaos prints and logs it.
func report(t *testing.T, r chaos.Row) {
	t.Helper()
	if err := chaos.AppendRow(os.Getenv("RUNPLANE_CHAOS_ROWS"), r); err != nil {
		t.Errorf("row: %v", err)
	}
	var b strings.Builder
	_ = chaos.PrintTable(&b, []chaos.Row{r})
	t.Logf("\n%s", b.String())
}

// goal checks the goal for every case: nothing accepted is lost,
// nothing finished runs again.
func goal(t *testing.T, o chaos.Outcome) {
	t.Helper()
	assert.Positive(t, o.Counts.Accepted, "nothing was accepted")
	assert.Zero(t, o.Counts.Lost, "accepted invocations never ended: %s", o.Counts)
	assert.Zero(t, o.Counts.RunTwice, "invocations the framework completed more than once: %s", o.Counts)
}
