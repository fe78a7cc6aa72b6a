package sidecar

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/runplane/runplane/internal/messages"
)

// outcomes is the sidecar's journal: one entry per dispatch it took, from
// the moment it is delivered until its result is stored and the dispatch
// acked — never removed before both, however often the sidecar restarts.
// A sidecar killed in between (OOM, a crash, SIGKILL) is restarted by the
// kubelet with the same directory (an emptyDir outlives container
// restarts) and settles every entry itself (recover.go): it hands back a
// dispatch it never started, re-attaches to or ends a call it started,
// and publishes an answer it got — a journaled call is never started
// twice.
//
// The started and answered phases are fsynced before the framework is
// called and before anything else happens to the answer: a journal that
// lost them would let a redelivery run the call again. The received phase
// is not (losing it costs only the ack wait of a dispatch never started).
type outcomes struct{ dir string }

// phase is how far an entry's dispatch got.
type phase string

const (
	// phaseReceived: delivered, not handed to the framework yet.
	phaseReceived phase = "received"
	// phaseStarted: handed to the framework, no answer yet.
	phaseStarted phase = "started"
	// phaseAnswered: the framework's outcome is Result ("" in an entry of
	// an older sidecar, which journaled answers only).
	phaseAnswered phase = "answered"
)

// outcome is one journal entry: the dispatch (without its payload, which
// the result does not need), the subject that acknowledges its delivery,
// and once answered the Result.
type outcome struct {
	ID       string            `json:"id"`
	Phase    phase             `json:"phase,omitempty"`
	Reply    string            `json:"reply,omitempty"`
	Result   messages.Result   `json:"result"`
	Dispatch messages.Dispatch `json:"dispatch"`
}

func (o outcome) answered() bool { return o.Phase == phaseAnswered || o.Phase == "" }

func (o outcomes) path(id string) string {
	sum := sha256.Sum256([]byte(id))
	return filepath.Join(o.dir, hex.EncodeToString(sum[:16])+".json")
}

// save writes (replaces) the entry, fsynced when sync (a no-op without a
// directory).
func (o outcomes) save(oc outcome, sync bool) error {
	if o.dir == "" {
		return nil
	}
	oc.Dispatch.Payload, oc.Dispatch.PayloadRef = nil, nil
	b, err := json.Marshal(oc)
	if err != nil {
		return fmt.Errorf("encode journal entry of %s: %w", oc.ID, err)
	}
	f, err := os.CreateTemp(o.dir, ".outcome-*")
	if err != nil {
		return fmt.Errorf("journal %s: %w", oc.ID, err)
	}
	_, werr := f.Write(b)
	if werr == nil && sync {
		werr = f.Sync()
	}
	if err := errors.Join(werr, f.Close()); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("journal %s: %w", oc.ID, err)
	}
	if err := os.Rename(f.Name(), o.path(oc.ID)); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("journal %s: %w", oc.ID, err)
	}
	if sync {
		// The rename is durable once the directory is.
		if err := syncDir(o.dir); err != nil {
			return fmt.Errorf("journal %s: %w", oc.ID, err)
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	return errors.Join(d.Sync(), d.Close())
}

// remove forgets the entry of dispatch id: its result is stored and the
// dispatch acked (or it was handed back unstarted).
func (o outcomes) remove(id string) error {
	if o.dir == "" {
		return nil
	}
	if err := os.Remove(o.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove journal entry of %s: %w", id, err)
	}
	return nil
}

// load reads every entry a previous run of the sidecar left. An entry that
// cannot be read is reported and skipped.
func (o outcomes) load() ([]outcome, []error) {
	if o.dir == "" {
		return nil, nil
	}
	ents, err := os.ReadDir(o.dir)
	if err != nil {
		return nil, []error{fmt.Errorf("read journal in %s: %w", o.dir, err)}
	}
	var out []outcome
	var errs []error
	for _, e := range ents {
		name := filepath.Join(o.dir, e.Name())
		if strings.HasPrefix(e.Name(), ".outcome-") {
			_ = os.Remove(name) // a save cut short: the entry before it stands
			continue
		}
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(name)
		var oc outcome
		if err == nil {
			err = json.Unmarshal(b, &oc)
		}
		if err != nil || oc.ID == "" {
			errs = append(errs, fmt.Errorf("journal entry %s: %w", name, errors.Join(err, errors.New("unreadable"))))
			_ = os.Remove(name)
			continue
		}
		out = append(out, oc)
	}
	return out, errs
}
