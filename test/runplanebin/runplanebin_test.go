package runplanebin

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDirRefusesWhatItCannotTrust: make test's directory is used as it is
// only while it holds the binaries asked for and none of the module's
// sources changed after they were built.
func TestDirRefusesWhatItCannotTrust(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "runplane-queue")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755))
	t.Setenv(EnvDir, dir)
	scratch := t.TempDir()

	got, err := Dir(t.Context(), scratch, "runplane-queue")
	require.NoError(t, err, "built after every source")
	assert.Equal(t, dir, got)

	_, err = Dir(t.Context(), scratch, "runplane-sidecar")
	require.ErrorContains(t, err, "has no runplane-sidecar")

	long := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	require.NoError(t, os.Chtimes(bin, long, long))
	for _, names := range [][]string{{"runplane-queue"}, nil} {
		_, err = Dir(t.Context(), scratch, names...)
		require.ErrorContains(t, err, "was built before", "names %v", names)
	}
}
