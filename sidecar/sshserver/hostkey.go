package sshserver

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"
)

// LoadOrCreateHostKey returns the host key stored at path, generating an
// ed25519 key there first if the file does not exist. Reusing the file keeps
// the key stable across container restarts, so clients' known_hosts entries
// stay valid for the Pod's life.
func LoadOrCreateHostKey(path string) (ssh.Signer, error) {
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		signer, perr := ssh.ParsePrivateKey(data)
		if perr != nil {
			return nil, fmt.Errorf("parse host key %s: %w", path, perr)
		}
		return signer, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("read host key %s: %w", path, err)
	}

	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "runplane-ssh host key")
	if err != nil {
		return nil, fmt.Errorf("marshal host key: %w", err)
	}
	// Write to a temp file and link it into place: a crash never leaves a
	// half-written key, and if two starts race the first key wins.
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".hostkey-*")
	if err != nil {
		return nil, fmt.Errorf("create host key in %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("chmod host key: %w", err)
	}
	if err := pem.Encode(tmp, block); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write host key: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("write host key: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return LoadOrCreateHostKey(path)
		}
		return nil, fmt.Errorf("install host key %s: %w", path, err)
	}
	return ssh.NewSignerFromKey(priv)
}
