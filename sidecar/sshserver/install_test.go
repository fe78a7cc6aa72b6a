package sshserver

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestInstallFileCopiesExecutable(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	require.NoError(t, os.WriteFile(src, []byte("#!/bin/sh\necho hi\n"), 0o600))
	dst := filepath.Join(dir, "bin", "runplane-ssh")
	if err := installFile(src, dst); err == nil {
		t.Fatal("install into a missing directory succeeded")
	}
	require.NoError(t, os.Mkdir(filepath.Dir(dst), 0o755))
	// Twice: a restarted init container installs over its earlier copy.
	for range 2 {
		require.NoError(t, installFile(src, dst))
	}
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	if !bytes.Equal(got, []byte("#!/bin/sh\necho hi\n")) {
		t.Errorf("content %q", got)
	}
	info, _ := os.Stat(dst)
	if info.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", info.Mode().Perm())
	}
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), ".install-*"))
	if len(leftovers) != 0 {
		t.Errorf("temp files left: %v", leftovers)
	}
}
