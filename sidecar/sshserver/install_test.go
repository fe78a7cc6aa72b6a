package sshserver

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestInstallFileCopiesExecutable(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	require.NoError(t, os.WriteFile(src, []byte("#!/bin/sh\necho hi\n"), 0o600))
	dst := filepath.Join(dir, "bin", "runplane-ssh")
	require.Error(t, installFile(src, dst), "install into a missing directory succeeded")
	require.NoError(t, os.Mkdir(filepath.Dir(dst), 0o755))
	// Twice: a restarted init container installs over its earlier copy.
	for range 2 {
		require.NoError(t, installFile(src, dst))
	}
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	assert.Equal(t, "#!/bin/sh\necho hi\n", string(got), "content")
	info, _ := os.Stat(dst)
	assert.EqualValues(t, 0o755, info.Mode().Perm(), "mode %v, want 0755", info.Mode().Perm())
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), ".install-*"))
	assert.Empty(t, leftovers, "temp files left: %v", leftovers)
}
