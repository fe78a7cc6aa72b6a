package execlog_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/test/chaos/execlog"
)

func TestReadCountsRunsAndSkipsTornLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "exec.log")
	w, err := execlog.Open(path)
	require.NoError(t, err)
	for _, e := range []execlog.Entry{
		{Event: execlog.Start, ID: "a", Worker: "w1"},
		{Event: execlog.End, ID: "a", Worker: "w1", Status: 200, Delivered: true},
		{Event: execlog.Start, ID: "a", Worker: "w2"},
		{Event: execlog.End, ID: "a", Worker: "w2", Status: 200, Delivered: true},
		{Event: execlog.Start, ID: "b", Worker: "w1"},
		{Event: execlog.End, ID: "b", Worker: "w1", Status: 200}, // its sidecar was gone
		{Event: execlog.Start, ID: "b", Worker: "w2"},
		{Event: execlog.Start, ID: "d", Worker: "w1"},
		{Event: execlog.End, ID: "d", Worker: "w1", Status: 200}, // answered, its sidecar gone
		{Event: execlog.Delivered, ID: "d", Worker: "w1"},        // collected by a re-attach
	} {
		require.NoError(t, w.Write(e))
	}
	require.NoError(t, w.Close())
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"ev":"start","id":"c"`) // torn by a SIGKILL
	require.NoError(t, err)
	require.NoError(t, f.Close())

	runs, err := execlog.Read(path)
	require.NoError(t, err)
	require.Equal(t, &execlog.Runs{Started: 2, Completed: 2, Answered: 2, StartedAfterEnd: 1, Workers: []string{"w1", "w2"}}, runs["a"])
	require.Equal(t, &execlog.Runs{Started: 2, Answered: 1, StartedAfterEnd: 1, Workers: []string{"w1", "w2"}}, runs["b"],
		"an answer nobody received still ends a run: the next start is finished work begun again")
	require.Equal(t, &execlog.Runs{Started: 1, Answered: 1, Completed: 1, Workers: []string{"w1"}}, runs["d"])
	require.NotContains(t, runs, "c")

	empty, err := execlog.Read(filepath.Join(t.TempDir(), "missing"))
	require.NoError(t, err)
	require.Empty(t, empty)
}
