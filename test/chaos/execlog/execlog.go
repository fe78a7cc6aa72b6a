// Package execlog is the execution log of the chaos harness: the recording
// framework appends one line when it starts running an invocation, one
// when it answers (whether or not a sidecar is there to read it) and one
// when an answer reached a sidecar, and the harness reads the file back to
// count runs per invocation — every execution, delivered or not. A run is
// identified by invocation ID, worker and process.
package execlog

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"
)

// Event kinds.
const (
	Start = "start"
	End   = "end"
	// Delivered: an answer reached a sidecar (a re-attaching sidecar may
	// collect the answer of a run whose End came before).
	Delivered = "delivered"
)

// Entry is one line of the log.
type Entry struct {
	Event  string `json:"ev"`
	ID     string `json:"id"`
	Worker string `json:"worker"`
	PID    int    `json:"pid"`
	Status int    `json:"status,omitempty"`
	// Delivered (on End) says the answer reached the sidecar: its write
	// and flush to the socket succeeded. An answer whose sidecar died
	// first never completed from the system's side.
	Delivered bool      `json:"delivered,omitempty"`
	At        time.Time `json:"t"`
}

// Writer appends entries to a file shared by every framework process.
// Each entry is one write(2) on an O_APPEND file, so lines of processes
// writing at once do not interleave.
type Writer struct {
	mu sync.Mutex
	f  *os.File
}

// Open opens (creating) the log at path for appending.
func Open(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("execlog: %w", err)
	}
	return &Writer{f: f}, nil
}

// Write appends e.
func (w *Writer) Write(e Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("execlog: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("execlog: %w", err)
	}
	return nil
}

// Close closes the file.
func (w *Writer) Close() error { return w.f.Close() }

// Runs is what the log says about one invocation.
type Runs struct {
	// Started counts the times a framework began running it.
	Started int
	// Completed counts the answers (any status) delivered to a sidecar.
	Completed int
	// Answered counts every answer, delivered or not.
	Answered int
	// StartedAfterEnd counts the starts that came after an answer of the
	// same invocation, delivered or not: finished work begun again (even
	// if that run is then cancelled).
	StartedAfterEnd int
	// Workers lists the worker of every start, in order.
	Workers []string
}

// Read parses the log at path into runs per invocation ID. A missing file
// is an empty log; a torn last line (a framework SIGKILLed mid-write) is
// skipped.
func Read(path string) (map[string]*Runs, error) {
	out := map[string]*Runs{}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("execlog: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var e Entry
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.ID == "" {
			continue
		}
		r := out[e.ID]
		if r == nil {
			r = &Runs{}
			out[e.ID] = r
		}
		switch e.Event {
		case Start:
			r.Started++
			if r.Answered > 0 {
				r.StartedAfterEnd++
			}
			r.Workers = append(r.Workers, e.Worker)
		case End:
			r.Answered++
			if e.Delivered {
				r.Completed++
			}
		case Delivered:
			r.Completed++
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("execlog: %w", err)
	}
	return out, nil
}
