package ingress

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	v1 "github.com/runplane/runplane/api/serverless/v1"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
)

// chunkMeta is what the reader takes from one stored chunk.
type chunkMeta struct {
	seq       uint64 // stream sequence: the event id
	worker    string // from the subject
	attempt   int
	execution string
	num       int
}

func parseChunk(subj messages.Subjects, subject string, seq uint64, attempt, execution, num string) (chunkMeta, bool) {
	a, err1 := strconv.Atoi(attempt)
	n, err2 := strconv.Atoi(num)
	w := subj.ChunkWorker(subject)
	if err1 != nil || err2 != nil || a < 1 || n < 1 || w == "" {
		return chunkMeta{}, false
	}
	return chunkMeta{seq: seq, worker: w, attempt: a, execution: execution, num: n}, true
}

// sseEvent is one event to write before (or instead of) a chunk.
type sseEvent struct {
	name string
	data any
}

// follower decides, chunk by chunk, what a stream's client gets: it
// follows one execution of one attempt at a time, and only chunks of the
// worker the Record says holds that attempt (any worker of the pool may
// publish under its own name for any invocation ID). Older attempts, runs
// given up and copies already sent are dropped; a newer attempt opens with
// an attempt event, a rerun of the same attempt with a restart event, and
// chunks that cannot be sent any more are announced by a gap event. Pure:
// the caller reads the chunks and the Record.
type follower struct {
	attempt   int
	execution string
	num       int // the last number sent (or the client had) in execution
	// given up: executions of attempt superseded by a rerun; bounded, a
	// worker can only hurt its own invocations' readers.
	abandoned map[string]bool
	// known: the client's position is known (a fresh stream, or a resume
	// whose chunk is still retained); when not, a first chunk numbered
	// above 1 may follow lost ones.
	known bool
}

const maxAbandoned = 64

// resumeFrom sets the position of a client that had chunk c.
func (f *follower) resumeFrom(c chunkMeta) {
	f.attempt, f.execution, f.num, f.known = c.attempt, c.execution, c.num, true
}

// Why a chunk is not sent (the drop label of
// runplane_ingress_stream_chunks_dropped_total).
const (
	dropForeign   = "foreign"   // not from the worker the Record says holds its attempt
	dropStale     = "stale"     // of an older attempt, or of a run given up for a rerun
	dropDuplicate = "duplicate" // a copy stored again by the sidecar's publish retry
)

// next decides on chunk c whose attempt is held by owner according to the
// Record ("" when the Record names none): deliver it or why not, and the
// events to write before it.
func (f *follower) next(c chunkMeta, owner string) (deliver bool, events []sseEvent, drop string) {
	if owner == "" || c.worker != owner {
		return false, nil, dropForeign
	}
	if c.attempt < f.attempt {
		return false, nil, dropStale // a superseded attempt's late output
	}
	switch {
	case c.attempt > f.attempt:
		// A client resumed after a chunk no longer retained had output of
		// some run; a first chunk after it begins another run (its own
		// chunks would all come before this one), so that output is to be
		// dropped, as after any new attempt.
		if f.attempt != 0 || (!f.known && c.num == 1) {
			events = append(events, sseEvent{v1.EventAttempt, v1.StreamAttempt{Attempt: c.attempt}})
		}
		f.attempt, f.execution, f.num, f.abandoned = c.attempt, c.execution, 0, nil
	case c.execution == f.execution:
		if c.num <= f.num {
			return false, nil, dropDuplicate
		}
	case f.abandoned[c.execution]:
		return false, nil, dropStale
	default:
		if len(f.abandoned) < maxAbandoned {
			if f.abandoned == nil {
				f.abandoned = map[string]bool{}
			}
			f.abandoned[f.execution] = true
		}
		events = append(events, sseEvent{v1.EventRestart, v1.StreamRestart{Attempt: c.attempt}})
		f.execution, f.num = c.execution, 0
	}
	if c.num > f.num+1 {
		g := v1.StreamGap{Attempt: c.attempt, FirstRetained: c.seq}
		if f.known {
			g.Missing = c.num - f.num - 1
			g.Reason = fmt.Sprintf("chunks %d to %d of this run are no longer retained", f.num+1, c.num-1)
		} else {
			g.Reason = "the chunk resumed after is no longer retained; chunks after it may be missing"
		}
		events = append(events, sseEvent{v1.EventGap, g})
	}
	f.num, f.known = c.num, true
	return true, events, ""
}

// end is the gap event (if any) before the result: the final Record's
// streamed answer had more chunks than the client got or had.
func (f *follower) end(final messages.Record) (sseEvent, bool) {
	r := final.Response
	if r == nil || r.Headers[framework.StreamedHeader] != "true" {
		return sseEvent{}, false
	}
	var sum framework.StreamSummary
	if json.Unmarshal(r.Body, &sum) != nil {
		return sseEvent{}, false
	}
	had := 0
	if f.attempt == final.Attempt {
		had = f.num
	}
	if sum.Chunks <= had {
		return sseEvent{}, false
	}
	if !f.known {
		return sseEvent{v1.EventGap, v1.StreamGap{Attempt: final.Attempt,
			Reason: fmt.Sprintf("the answer streamed %d chunks; the chunk resumed after and those after it are no longer retained", sum.Chunks)}}, true
	}
	return sseEvent{v1.EventGap, v1.StreamGap{Attempt: final.Attempt, Missing: sum.Chunks - had,
		Reason: fmt.Sprintf("the answer streamed %d chunks; %d of them are no longer retained", sum.Chunks, sum.Chunks-had)}}, true
}

// resumable reports whether c, the chunk a client resumes after, says
// where the client is: a chunk of the worker rec says held its attempt, or
// of an earlier attempt rec no longer names a worker for (one whose worker
// was lost: only retried and handed-back attempts are listed), which the
// client can only have had from a stream that checked it then. Then a
// later attempt's output follows an attempt event, never unannounced.
func resumable(rec messages.Record, c chunkMeta) bool {
	o := owner(rec, c.attempt)
	return o == c.worker || (o == "" && c.attempt < rec.Attempt)
}

// owner is the worker rec says holds attempt ("" when it names none).
func owner(rec messages.Record, attempt int) string {
	if attempt == rec.Attempt {
		return rec.Worker
	}
	for _, a := range rec.Attempts {
		if a.Attempt == attempt {
			return a.Worker
		}
	}
	return ""
}

// recordChecks decides when a chunk calls for a fresh read of the Record:
// its attempt is newer than the Record as read. The decision rests on the
// Record, never on a chunk's own attempt header, which any worker of the
// pool writes: a sibling's forged attempt 999999 must not stop the check
// for the real next attempt (whose chunks would be dropped as foreign).
// Each (attempt, worker) is checked once; beyond maxRecordChecks of them
// (a hostile worker inventing attempts), at most one read per second.
type recordChecks struct {
	seen map[chunkOwner]bool
	last time.Time
}

type chunkOwner struct {
	attempt int
	worker  string
}

const maxRecordChecks = 64

func (r *recordChecks) need(rec messages.Record, c chunkMeta, now time.Time) bool {
	if c.attempt <= rec.Attempt {
		return false
	}
	k := chunkOwner{c.attempt, c.worker}
	if r.seen[k] {
		return false
	}
	if len(r.seen) >= maxRecordChecks {
		if now.Sub(r.last) < time.Second {
			return false
		}
	} else {
		if r.seen == nil {
			r.seen = map[chunkOwner]bool{}
		}
		r.seen[k] = true
	}
	r.last = now
	return true
}
