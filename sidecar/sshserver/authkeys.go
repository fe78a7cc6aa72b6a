package sshserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// KeySet is the set of public keys currently allowed to log in. It is safe
// for concurrent use; Reload swaps the whole set at once.
type KeySet struct {
	path string
	log  *slog.Logger

	mu   sync.RWMutex
	keys map[string]struct{} // ssh.PublicKey.Marshal() of each allowed key
	sum  [sha256.Size]byte
	read bool
}

// NewKeySet returns a KeySet for the authorized_keys file at path. It holds
// no keys until Reload has been called.
func NewKeySet(path string, log *slog.Logger) *KeySet {
	return &KeySet{path: path, log: log, keys: map[string]struct{}{}}
}

// Allowed reports whether key is listed.
func (k *KeySet) Allowed(key ssh.PublicKey) bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	_, ok := k.keys[string(key.Marshal())]
	return ok
}

// Len returns the number of listed keys.
func (k *KeySet) Len() int {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return len(k.keys)
}

// Reload re-reads the file and reports whether the set changed. A file that
// cannot be read empties the set: failing closed is the only safe answer
// when the list of who may log in is unknown.
func (k *KeySet) Reload() (bool, error) {
	data, err := os.ReadFile(k.path)
	if err != nil {
		changed := k.swap(map[string]struct{}{}, [sha256.Size]byte{})
		return changed, fmt.Errorf("read authorized keys %s: %w", k.path, err)
	}
	sum := sha256.Sum256(data)
	k.mu.RLock()
	same := k.read && sum == k.sum
	k.mu.RUnlock()
	if same {
		return false, nil
	}
	keys, bad := ParseAuthorizedKeys(data)
	for _, line := range bad {
		// The line number only: a malformed line may be a pasted secret.
		k.log.Warn("skipping malformed authorized_keys line", "file", k.path, "line", line)
	}
	return k.swap(keys, sum), nil
}

func (k *KeySet) swap(keys map[string]struct{}, sum [sha256.Size]byte) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	changed := !k.read || sum != k.sum
	k.keys, k.sum, k.read = keys, sum, true
	return changed
}

// ParseAuthorizedKeys parses OpenSSH authorized_keys content. It returns the
// set of keys (by wire encoding) and the 1-based numbers of lines that are
// neither blank, comments, nor valid keys. Key options (from=, command=, ...)
// are accepted but not enforced.
func ParseAuthorizedKeys(data []byte) (map[string]struct{}, []int) {
	keys := map[string]struct{}{}
	var bad []int
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		pub, _, _, _, err := ssh.ParseAuthorizedKey(line)
		if err != nil {
			bad = append(bad, i+1)
			continue
		}
		keys[string(pub.Marshal())] = struct{}{}
	}
	return keys, bad
}

// Watch polls the file every interval until ctx ends, reloading on change.
// Polling the content (not fsnotify on the path) survives the atomic
// symlink swap Kubernetes uses to update Secret volumes.
func (k *KeySet) Watch(ctx context.Context, interval time.Duration, onReload func(keys int, err error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	lastErr := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := k.Reload()
		errText := ""
		if err != nil {
			errText = err.Error()
		}
		// Report changes and new errors, not the same error every tick.
		if changed || errText != lastErr {
			onReload(k.Len(), err)
		}
		lastErr = errText
	}
}
