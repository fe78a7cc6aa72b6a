package v1

// Server-sent events of an invocation's stream (POST with Accept:
// text/event-stream or "stream": true; GET …/invocations/{id}/stream).
// Every event has an id: the invocation, attempt, restart and gap events
// that of the last chunk the client has (0: none), a chunk its position in
// its namespace's chunk stream, the result event ResultEventID. A client
// that lost the connection resumes with Last-Event-ID on any replica; a
// resume after the result event is answered 204 No Content.

// SSE event names.
const (
	// EventInvocation opens every stream (StreamOpening).
	EventInvocation = "invocation"
	// EventChunk is one chunk; its data is the chunk's text.
	EventChunk = "chunk"
	// EventAttempt: a retry started over; the chunks after it are the new
	// attempt's output (StreamAttempt).
	EventAttempt = "attempt"
	// EventRestart: the current attempt was run again from its start (a
	// restarted sidecar); the chunks after it are the new run's
	// (StreamRestart).
	EventRestart = "restart"
	// EventGap: chunks the client has not had are no longer retained and
	// will never come (StreamGap).
	EventGap = "gap"
	// EventResult ends the stream with the terminal Invocation (a response
	// body too big to inline is left out: GET the invocation for it).
	EventResult = "result"
)

// ResultEventID is the id of the result event: a stream resumed after it
// is over (204 No Content).
const ResultEventID = "result"

// StreamOpening is the data of the invocation event.
type StreamOpening struct {
	InvocationID string `json:"invocationID"`
	Namespace    string `json:"namespace"`
	Pool         string `json:"pool"`
	State        State  `json:"state"`
}

// StreamAttempt is the data of the attempt event: a retry started over,
// and the chunks after it are the new attempt's output.
type StreamAttempt struct {
	Attempt int `json:"attempt"`
}

// StreamRestart is the data of the restart event: the current attempt was
// run again from its start (its worker's sidecar restarted and was handed
// the same dispatch), and the chunks after it are the new run's output,
// from its first; the earlier run's chunks sent before are not part of the
// answer the invocation ends with.
type StreamRestart struct {
	Attempt int `json:"attempt"`
}

// StreamGap is the data of the gap event: chunks of the output the client
// follows are no longer retained (evicted by the namespace's chunk budget,
// aged out, or beyond the per-invocation limit) and will never be sent.
type StreamGap struct {
	Attempt int `json:"attempt"`
	// FirstRetained is the id of the next chunk event, the first retained
	// after the gap (absent: no later chunk is retained).
	FirstRetained uint64 `json:"firstRetained,omitempty"`
	// Missing counts the chunks known to be lost (0: unknown, when the
	// chunk the client resumed after is itself no longer retained).
	Missing int    `json:"missing,omitempty"`
	Reason  string `json:"reason"`
}
