package messages

// Streamed results (issue #20). A framework that answers an invocation
// with a stream (text/event-stream or application/x-ndjson) has each chunk
// relayed by the sidecar, as it arrives, to the invocation's own chunk
// subject, chunk.<ns>.<pool>.<invocation ID>, in the chunks stream
// (ChunksStreamName). Chunks are numbered per attempt (ChunkSeqHeader,
// from 1) and carry their attempt (ChunkAttemptHeader); the stream
// sequence orders them and is the SSE event ID the ingress serves, so a
// client resumes after any chunk with Last-Event-ID on any replica. The
// final Result follows on result.<ns>.<pool> as for any invocation, only
// after every chunk of the attempt is stored.

// Chunk headers the sidecar sets on every chunk message.
const (
	// ChunkAttemptHeader is the attempt that produced the chunk.
	ChunkAttemptHeader = "Runplane-Attempt"
	// ChunkSeqHeader numbers the chunks of one attempt, from 1.
	ChunkSeqHeader = "Runplane-Chunk"
)

// Chunk is the subject of invocation id's chunks (JetStream, the chunks
// stream). Workers of ns/pool may publish on Chunk(ns, pool, "*") only:
// their own pool's invocations.
func (s Subjects) Chunk(ns, pool, id string) string {
	return s.Prefix + ".chunk." + ns + "." + pool + "." + id
}

// ChunkStreamSubjects are the subjects of the chunks stream.
func (s Subjects) ChunkStreamSubjects() []string { return []string{s.Prefix + ".chunk.>"} }

// ChunksStreamName is the chunks stream that goes with invocation stream
// stream. It is a stream of its own, like the results stream: workers
// publish into it and choose their headers, so it must not share a
// Nats-Msg-Id deduplication window with the queue's messages.
func ChunksStreamName(stream string) string { return stream + "_CHUNKS" }
