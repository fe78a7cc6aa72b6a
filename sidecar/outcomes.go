package sidecar

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/runplane/runplane/internal/messages"
)

// outcomes keeps the framework's outcome of each execution on disk, from
// the moment the framework answered until the result is stored and the
// dispatch acked. A sidecar killed in between (OOM, a crash, SIGKILL) is
// restarted by the kubelet with the same directory (an emptyDir outlives
// container restarts): it publishes what it finds instead of calling the
// framework again when the dispatch comes back.
//
// No fsync: this guards against the sidecar's own death, after which the
// kernel still holds the write; a node that dies takes the Pod and its
// emptyDir with it, and the activator settles its work (queue/README.md).
type outcomes struct{ dir string }

// outcome is one journal entry: the Result and the Dispatch it answers
// (without its payload, which the result does not need).
type outcome struct {
	ID       string            `json:"id"`
	Result   messages.Result   `json:"result"`
	Dispatch messages.Dispatch `json:"dispatch"`
}

func (o outcomes) path(id string) string {
	sum := sha256.Sum256([]byte(id))
	return filepath.Join(o.dir, hex.EncodeToString(sum[:16])+".json")
}

// save writes the entry for dispatch id (a no-op without a directory).
func (o outcomes) save(id string, res messages.Result, d messages.Dispatch) error {
	if o.dir == "" {
		return nil
	}
	d.Payload, d.PayloadRef = nil, nil
	b, err := json.Marshal(outcome{ID: id, Result: res, Dispatch: d})
	if err != nil {
		return fmt.Errorf("encode outcome of %s: %w", id, err)
	}
	f, err := os.CreateTemp(o.dir, ".outcome-*")
	if err != nil {
		return fmt.Errorf("save outcome of %s: %w", id, err)
	}
	_, werr := f.Write(b)
	if err := errors.Join(werr, f.Close()); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("save outcome of %s: %w", id, err)
	}
	if err := os.Rename(f.Name(), o.path(id)); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("save outcome of %s: %w", id, err)
	}
	return nil
}

// remove forgets the entry of dispatch id: its result is stored.
func (o outcomes) remove(id string) error {
	if o.dir == "" {
		return nil
	}
	if err := os.Remove(o.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove outcome of %s: %w", id, err)
	}
	return nil
}

// load reads every entry a previous run of the sidecar left. An entry that
// cannot be read is reported and skipped (its dispatch runs again, as
// without a journal).
func (o outcomes) load() ([]outcome, []error) {
	if o.dir == "" {
		return nil, nil
	}
	ents, err := os.ReadDir(o.dir)
	if err != nil {
		return nil, []error{fmt.Errorf("read outcomes in %s: %w", o.dir, err)}
	}
	var out []outcome
	var errs []error
	for _, e := range ents {
		name := filepath.Join(o.dir, e.Name())
		if strings.HasPrefix(e.Name(), ".outcome-") {
			_ = os.Remove(name) // a save cut short: the dispatch runs again
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
			errs = append(errs, fmt.Errorf("outcome %s: %w", name, errors.Join(err, errors.New("unreadable"))))
			_ = os.Remove(name)
			continue
		}
		out = append(out, oc)
	}
	return out, errs
}

// replayOutcomes publishes the outcomes a previous run of this sidecar
// left unstored. Until each is stored its dispatch, redelivered, is kept
// in progress (handle), never run.
func (s *Sidecar) replayOutcomes(stop context.Context) {
	found, errs := s.outcomes.load()
	for _, err := range errs {
		s.log.Warn("outcome journal", "err", err)
	}
	for _, oc := range found {
		ex := &execution{attempt: oc.Dispatch.Attempt}
		ex.finish(oc.Result.State)
		replayed := make(chan struct{})
		s.mu.Lock()
		s.replaying[oc.ID] = replayed
		s.held[oc.Dispatch.InvocationID] = ex
		s.mu.Unlock()
		s.log.Info("publishing an outcome stored before a restart; the framework does not run it again",
			"invocation", oc.Dispatch.InvocationID, "attempt", oc.Dispatch.Attempt, "state", oc.Result.State)
		s.replays.Add(1)
		go func() {
			defer s.replays.Done()
			ok := s.publishResult(stop, oc.Result, oc.ID, oc.Dispatch)
			if ok {
				s.rememberCompleted(oc.ID, oc.Dispatch.InvocationID)
				if err := s.outcomes.remove(oc.ID); err != nil {
					s.log.Warn("outcome journal", "err", err)
				}
			}
			s.mu.Lock()
			delete(s.replaying, oc.ID)
			s.mu.Unlock()
			close(replayed)
		}()
	}
}

// keepUntilReplayed keeps msg, a redelivered dispatch of an outcome being
// replayed, in progress until the replay ends, then acks it when the
// result was stored (else it is left for the next start's replay): so it
// neither comes back every ack wait nor reaches its MaxDeliver meanwhile.
func (s *Sidecar) keepUntilReplayed(log *slog.Logger, msg jetstream.Msg, id string, replayed <-chan struct{}) {
	go func() {
		t := time.NewTicker(s.progressPeriod())
		defer t.Stop()
		for {
			select {
			case <-replayed:
				s.mu.Lock()
				_, stored := s.completed[id]
				s.mu.Unlock()
				if stored {
					s.acked(log, "ack", msg.Ack())
				}
				return
			case <-t.C:
				s.acked(log, "in_progress", msg.InProgress())
			}
		}
	}()
}
