package chaos_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/test/chaos"
	"github.com/runplane/runplane/test/chaos/execlog"
)

func TestCount(t *testing.T) {
	rec := func(s messages.State) messages.Record { return messages.Record{State: s} }
	for _, tc := range []struct {
		name string
		recs map[string]messages.Record
		runs map[string]*execlog.Runs
		want func(c chaos.Counts) chaos.Counts
	}{
		{
			name: "succeeded once",
			recs: map[string]messages.Record{"a": rec(messages.StateSucceeded)},
			runs: map[string]*execlog.Runs{"a": {Started: 1, Answered: 1, Completed: 1}},
			want: func(c chaos.Counts) chaos.Counts { c.Succeeded = 1; return c },
		},
		{
			name: "completed twice",
			recs: map[string]messages.Record{"a": rec(messages.StateSucceeded)},
			runs: map[string]*execlog.Runs{"a": {Started: 2, Answered: 2, Completed: 2, StartedAfterEnd: 1}},
			want: func(c chaos.Counts) chaos.Counts { c.Succeeded, c.RunTwice, c.Restarted = 1, 1, 1; return c },
		},
		{
			name: "redelivered after a kill mid-run",
			recs: map[string]messages.Record{"a": rec(messages.StateSucceeded)},
			runs: map[string]*execlog.Runs{"a": {Started: 2, Answered: 1, Completed: 1}},
			want: func(c chaos.Counts) chaos.Counts { c.Succeeded, c.Restarted = 1, 1; return c },
		},
		{
			name: "begun again after it answered, then cancelled",
			recs: map[string]messages.Record{"a": rec(messages.StateSucceeded)},
			runs: map[string]*execlog.Runs{"a": {Started: 2, Answered: 1, Completed: 1, StartedAfterEnd: 1}},
			want: func(c chaos.Counts) chaos.Counts { c.Succeeded, c.RunTwice, c.Restarted = 1, 1, 1; return c },
		},
		{
			name: "answered undelivered, then run again",
			recs: map[string]messages.Record{"a": rec(messages.StateSucceeded)},
			runs: map[string]*execlog.Runs{"a": {Started: 2, Answered: 2, Completed: 1, StartedAfterEnd: 1}},
			want: func(c chaos.Counts) chaos.Counts { c.Succeeded, c.RunTwice, c.Restarted = 1, 1, 1; return c },
		},
		{
			name: "answered once, collected by a re-attach and a repeat",
			recs: map[string]messages.Record{"a": rec(messages.StateSucceeded)},
			runs: map[string]*execlog.Runs{"a": {Started: 1, Answered: 1, Completed: 2}},
			want: func(c chaos.Counts) chaos.Counts { c.Succeeded = 1; return c },
		},
		{
			name: "failed without running",
			recs: map[string]messages.Record{"a": rec(messages.StateFailed)},
			want: func(c chaos.Counts) chaos.Counts { c.Failed, c.FailedUnrun = 1, 1; return c },
		},
		{
			name: "stuck queued",
			recs: map[string]messages.Record{"a": rec(messages.StateQueued)},
			want: func(c chaos.Counts) chaos.Counts { c.Lost = 1; return c },
		},
		{
			name: "no record",
			want: func(c chaos.Counts) chaos.Counts { c.Lost = 1; return c },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := chaos.Count([]string{"a"}, tc.recs, tc.runs)
			got.States, got.Examples, got.MaxStarts = nil, nil, 0
			require.Equal(t, tc.want(chaos.Counts{Accepted: 1}), got)
		})
	}
}

func TestRowsRoundTrip(t *testing.T) {
	path := t.TempDir() + "/rows"
	in := []chaos.Row{
		chaos.NewRow("a", 100, "30s", chaos.Counts{Accepted: 3, Succeeded: 2, Lost: 1}, 64<<20, ""),
		chaos.NewRow("b", 5, "1m0s", chaos.Counts{Accepted: 1, Failed: 1, FailedUnrun: 1}, 0, "note"),
	}
	for _, r := range in {
		require.NoError(t, chaos.AppendRow(path, r))
	}
	var buf bytes.Buffer
	_, err := buf.ReadFrom(mustOpen(t, path))
	require.NoError(t, err)
	out, err := chaos.ReadRows(&buf)
	require.NoError(t, err)
	require.Equal(t, in, out)
	var table bytes.Buffer
	require.NoError(t, chaos.PrintTable(&table, out))
	require.Contains(t, table.String(), "run twice")
	require.Len(t, bytes.Split(bytes.TrimSpace(table.Bytes()), []byte("\n")), 3)
}

func mustOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}
