package sshserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/runplane/runplane/internal/refusal"
	"golang.org/x/crypto/ssh"
)

// KeySet is the set of public keys currently allowed to log in, each with
// the options of the authorized_keys lines that list it. It is safe for
// concurrent use; Reload swaps the whole set at once.
type KeySet struct {
	path string
	log  *slog.Logger

	mu   sync.RWMutex
	keys AuthorizedKeys
	sum  [sha256.Size]byte
	read bool
}

// AuthorizedKeys is a parsed authorized_keys file.
type AuthorizedKeys struct {
	// Keys maps a key's wire encoding to the lines that grant it, in file
	// order (a key may be listed more than once, e.g. with different from=).
	Keys map[string][]KeyLine
	// Refused lists the lines that grant nothing: malformed, or carrying an
	// option this server does not implement or cannot parse.
	Refused []RefusedLine
	// refusedKeys maps a key found only on refused lines to its first
	// refusal, so a login with it can say why.
	refusedKeys map[string]RefusedLine
}

// KeyLine is one usable authorized_keys line.
type KeyLine struct {
	Line    int
	Options KeyOptions
}

// RefusedLine is an authorized_keys line that grants nothing.
type RefusedLine struct {
	Line   int
	Reason string // unsupported_option, invalid_option, malformed
	Option string // option name, empty when malformed
	Detail string
}

// keyRefusal says why a listed key may not log in; reason is a metric
// label: "from", no line's from= matches; "options", only on refused lines.
func keyRefusal(reason string, line int, detail string) error {
	return refusal.New(0, reason, "authorized_keys line %d: %s", line, detail)
}

// errNotListed is the refusal of a key that is not in the file at all.
var errNotListed = errors.New("key not in authorized_keys")

// NewKeySet returns a KeySet for the authorized_keys file at path. It holds
// no keys until Reload has been called.
func NewKeySet(path string, log *slog.Logger) *KeySet {
	return &KeySet{path: path, log: log, keys: AuthorizedKeys{Keys: map[string][]KeyLine{}}}
}

// Authorize returns the first line listing key whose from= admits the
// client address ip (OpenSSH checks lines in order the same way). It
// returns errNotListed or a keyRefusal otherwise.
func (k *KeySet) Authorize(key ssh.PublicKey, ip string) (KeyLine, error) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	wire := string(key.Marshal())
	lines, ok := k.keys.Keys[wire]
	if !ok {
		if r, refused := k.keys.refusedKeys[wire]; refused {
			return KeyLine{}, keyRefusal("options", r.Line, fmt.Sprintf("key listed only on refused lines (%s %s)", r.Reason, r.Option))
		}
		return KeyLine{}, errNotListed
	}
	for _, l := range lines {
		if l.Options.AllowsFrom(ip) {
			return l, nil
		}
	}
	return KeyLine{}, keyRefusal("from", lines[0].Line, "client address not permitted by from=")
}

// Allowed reports whether key is listed on a usable line (ignoring from=).
func (k *KeySet) Allowed(key ssh.PublicKey) bool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	_, ok := k.keys.Keys[string(key.Marshal())]
	return ok
}

// Len returns the number of usable keys.
func (k *KeySet) Len() int {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return len(k.keys.Keys)
}

// RefusedByReason counts the refused lines of the current file by reason.
func (k *KeySet) RefusedByReason() map[string]int {
	k.mu.RLock()
	defer k.mu.RUnlock()
	n := map[string]int{reasonUnsupported: 0, reasonInvalid: 0, reasonMalformed: 0}
	for _, r := range k.keys.Refused {
		n[r.Reason]++
	}
	return n
}

// Reload re-reads the file and reports whether the set changed. A file that
// cannot be read empties the set: failing closed is the only safe answer
// when the list of who may log in is unknown.
func (k *KeySet) Reload() (bool, error) {
	data, err := os.ReadFile(k.path)
	if err != nil {
		changed := k.swap(AuthorizedKeys{Keys: map[string][]KeyLine{}}, [sha256.Size]byte{})
		return changed, fmt.Errorf("read authorized keys %s: %w", k.path, err)
	}
	sum := sha256.Sum256(data)
	k.mu.RLock()
	same := k.read && sum == k.sum
	k.mu.RUnlock()
	if same {
		return false, nil
	}
	keys := ParseAuthorizedKeys(data)
	for _, r := range keys.Refused {
		// The line number and the option's name only: a malformed line may
		// be a pasted secret, an option value may carry one.
		k.log.Warn("refusing authorized_keys line", "file", k.path, "line", r.Line, "reason", r.Reason,
			"option", r.Option, "detail", r.Detail)
	}
	return k.swap(keys, sum), nil
}

func (k *KeySet) swap(keys AuthorizedKeys, sum [sha256.Size]byte) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	changed := !k.read || sum != k.sum
	k.keys, k.sum, k.read = keys, sum, true
	return changed
}

// ParseAuthorizedKeys parses OpenSSH authorized_keys content with
// ssh.ParseAuthorizedKey and evaluates each line's options with
// ParseKeyOptions. A line that is malformed, or whose options are not all
// implemented and valid, is refused: it grants nothing and is reported.
func ParseAuthorizedKeys(data []byte) AuthorizedKeys {
	out := AuthorizedKeys{Keys: map[string][]KeyLine{}, refusedKeys: map[string]RefusedLine{}}
	for i, line := range bytes.Split(data, []byte("\n")) {
		n := i + 1
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		pub, _, opts, _, err := ssh.ParseAuthorizedKey(line)
		if err != nil {
			out.Refused = append(out.Refused, RefusedLine{Line: n, Reason: reasonMalformed, Detail: "not a valid key line"})
			continue
		}
		wire := string(pub.Marshal())
		o, err := ParseKeyOptions(opts)
		if err != nil {
			r := RefusedLine{Line: n, Reason: reasonInvalid, Detail: err.Error()}
			var oe *OptionError
			if errors.As(err, &oe) {
				r.Reason, r.Option, r.Detail = oe.Reason, oe.Option, oe.Detail
			}
			out.Refused = append(out.Refused, r)
			if _, seen := out.refusedKeys[wire]; !seen {
				out.refusedKeys[wire] = r
			}
			continue
		}
		out.Keys[wire] = append(out.Keys[wire], KeyLine{Line: n, Options: o})
	}
	for wire := range out.Keys {
		delete(out.refusedKeys, wire)
	}
	return out
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
