package messages

import (
	"strings"
)

// Streamed results (issue #20). A framework that answers an invocation
// with a stream (text/event-stream or application/x-ndjson) has each chunk
// relayed by the sidecar, as it arrives, to the invocation's chunk subject
// of its worker, chunks.<ns>.<pool>.<worker>.<invocation ID> (ChunkSubject),
// in its namespace's chunks stream (ChunksStreamName): one stream per
// namespace, so one tenant's chunks never evict another's. The worker
// token lets the NATS auth callout grant each worker only its own chunk
// subjects, and lets a reader take only the chunks of the worker the
// Record says holds an attempt.
//
// Chunks carry their attempt (ChunkAttemptHeader), the execution that
// produced them (ChunkExecutionHeader: random per framework call, so a
// restarted sidecar's rerun of the same attempt is told apart from the
// first run) and their number within that execution (ChunkSeqHeader, from
// 1). The stream sequence orders them and is the SSE event ID the ingress
// serves, so a client resumes after any chunk with Last-Event-ID on any
// replica. The final Result follows on result.<ns>.<pool> as for any
// invocation, only after every chunk of the attempt is stored.

// Chunk headers the sidecar sets on every chunk message.
const (
	// ChunkAttemptHeader is the attempt that produced the chunk.
	ChunkAttemptHeader = "Runplane-Attempt"
	// ChunkExecutionHeader names one execution (one framework call) of an
	// attempt: random, fresh for every call, so a rerun of the same
	// attempt (a restarted sidecar handed its dispatch again) numbers its
	// chunks from 1 under another execution.
	ChunkExecutionHeader = "Runplane-Execution"
	// ChunkSeqHeader numbers the chunks of one execution, from 1.
	ChunkSeqHeader = "Runplane-Chunk"
)

// ChunkSubject is the subject of invocation id's chunks as relayed by
// worker of ns/pool. The auth callout grants a worker only
// ChunkSubject(ns, pool, worker, "*").
func (s Subjects) ChunkSubject(ns, pool, worker, id string) string {
	return s.Prefix + ".chunks." + ns + "." + pool + "." + worker + "." + id
}

// InvocationChunks is the filter of invocation id's chunks from any worker
// of its pool: a reader takes each chunk as of the worker its subject
// names (ChunkWorker).
func (s Subjects) InvocationChunks(ns, pool, id string) string {
	return s.ChunkSubject(ns, pool, "*", id)
}

// ChunkWorker is the worker token of a chunk subject of s ("" when subject
// is not one).
func (s Subjects) ChunkWorker(subject string) string {
	rest, ok := strings.CutPrefix(subject, s.Prefix+".chunks.")
	if !ok {
		return ""
	}
	t := strings.Split(rest, ".")
	if len(t) != 4 {
		return ""
	}
	return t[2]
}

// ChunkStreamSubjects are the subjects of namespace ns's chunks stream.
func (s Subjects) ChunkStreamSubjects(ns string) []string {
	return []string{s.Prefix + ".chunks." + ns + ".>"}
}

// ChunksStreamName is namespace ns's chunks stream that goes with
// invocation stream stream, "<stream>_CHUNKS_<ns>" (a namespace is a
// DNS-1123 label: no '.', '_' or wildcard). It is a stream of its own,
// like the results stream: workers publish into it and choose their
// headers, so it must not share a Nats-Msg-Id deduplication window with
// the queue's messages.
func ChunksStreamName(stream, ns string) string { return LegacyChunksStreamName(stream) + "_" + ns }

// LegacyChunksStreamName is the one chunks stream of every namespace of
// releases before per-namespace chunk streams (subjects <prefix>.chunk.>):
// nothing reads or writes it any more (queue/README.md, "Upgrading").
func LegacyChunksStreamName(stream string) string { return stream + "_CHUNKS" }
