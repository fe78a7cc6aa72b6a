package sshserver

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// InstallSelf copies the running executable to dst (mode 0755), through a
// temp file and a rename so a restarted init container never leaves a
// half-written binary. The webhook runs it in an init container so the SSH
// sidecar can then run from the user's image, which has the user's shell.
func InstallSelf(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("install: locating own executable: %w", err)
	}
	return installFile(self, dst)
}

func installFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".install-*")
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if _, err = io.Copy(tmp, in); err != nil {
		tmp.Close()
		return fmt.Errorf("install: copying to %s: %w", dst, err)
	}
	if err = tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return fmt.Errorf("install: %w", err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	if err = os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	return nil
}
