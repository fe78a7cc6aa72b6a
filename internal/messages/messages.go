// Package messages is the NATS wire format and KV schema of the serverless
// path between the queue service (ingress, activator) and the worker
// sidecar: the subjects, the JSON bodies published on them, the invocation
// states, the Records and the pool status the activator publishes. Both
// sides import it; nothing here talks to NATS, and nothing here is shown to
// callers as it is: their view is api/serverless/v1.
//
// A pool is named by its namespace and name, and every subject carries
// both: <prefix>.<kind>.<ns>.<pool>[.<worker>].
//
// Flow: ingress publishes an Invocation on invoke.<ns>.<pool> (JetStream,
// Nats-Msg-Id = invocation ID) and records a Record in the KV bucket. The
// activator sends a Dispatch on dispatch.<ns>.<pool>.<worker> (JetStream,
// Nats-Msg-Id = DispatchPublishID). The sidecar consumes its dispatch
// subject, acks in progress while the framework runs, publishes a Result on
// result.<ns>.<pool> (JetStream, the separate results stream, no
// Nats-Msg-Id), answers the
// sync caller on Dispatch.ReplyTo (under reply.<ns>.<pool>) when set, then
// acks. Worker Events (register, heartbeat, started, finished, deregister)
// go to metrics.<ns>.<pool>.<worker> on core NATS: the worker's own subject,
// the only one NATS lets it publish events on, so the subject (never the
// body) says which worker an Event is about. A Cancel goes to
// cancel.<ns>.<pool>.<worker> on core NATS.
package messages

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"regexp"
	"strings"
	"time"
)

// Mode is how the caller waits for the result.
type Mode string

const (
	ModeSync  Mode = "sync"
	ModeAsync Mode = "async"
)

// State is an invocation's state. Terminal states never change again.
type State string

const (
	StateQueued       State = "queued"
	StateDispatched   State = "dispatched"
	StateRunning      State = "running"
	StateSucceeded    State = "succeeded"
	StateFailed       State = "failed"
	StateTimedOut     State = "timed_out"
	StateCancelled    State = "cancelled"
	StateDeadLettered State = "dead_lettered"
)

// Terminal reports whether s is a final state.
func (s State) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateTimedOut, StateCancelled, StateDeadLettered:
		return true
	}
	return false
}

// Subjects builds the subjects under one prefix (default runtime.serverless).
// Every subject carries the pool's namespace before the pool: a pool's
// identity is <namespace>/<pool>, and NATS permissions are granted per
// namespace and pool on these subjects.
type Subjects struct{ Prefix string }

// Invoke is where ingress stores invocations of ns/pool (JetStream).
func (s Subjects) Invoke(ns, pool string) string { return s.Prefix + ".invoke." + ns + "." + pool }

// Dispatch is where the activator sends worker its invocations (JetStream).
func (s Subjects) Dispatch(ns, pool, worker string) string {
	return s.Prefix + ".dispatch." + ns + "." + pool + "." + worker
}

// ParseInvoke reads an Invoke subject back (ok false for any other
// subject: another prefix or kind, a token empty, missing or one too many).
func (s Subjects) ParseInvoke(subject string) (ns, pool string, ok bool) {
	ok = s.parse(subject, "invoke", &ns, &pool)
	return ns, pool, ok
}

// ParseDispatch reads a Dispatch subject back, as ParseInvoke.
func (s Subjects) ParseDispatch(subject string) (ns, pool, worker string, ok bool) {
	ok = s.parse(subject, "dispatch", &ns, &pool, &worker)
	return ns, pool, worker, ok
}

// ParseResult reads a Result subject back, as ParseInvoke.
func (s Subjects) ParseResult(subject string) (ns, pool string, ok bool) {
	ok = s.parse(subject, "result", &ns, &pool)
	return ns, pool, ok
}

// parse reads subject as <prefix>.<kind>.<token>… into tokens, one each:
// none may be empty, and none may be left over. It does not allocate
// (every invocation's and result's subject is read on the activator's
// path).
func (s Subjects) parse(subject, kind string, tokens ...*string) bool {
	rest, ok := strings.CutPrefix(subject, s.Prefix)
	if ok {
		rest, ok = strings.CutPrefix(rest, ".")
	}
	if ok {
		rest, ok = strings.CutPrefix(rest, kind+".")
	}
	if !ok {
		return false
	}
	for i, t := range tokens {
		tok := rest
		if i < len(tokens)-1 {
			if tok, rest, ok = strings.Cut(rest, "."); !ok {
				return false
			}
		} else if strings.Contains(rest, ".") {
			return false
		}
		if tok == "" {
			return false
		}
		*t = tok
	}
	return true
}

// Result is where workers of ns/pool publish results (JetStream).
func (s Subjects) Result(ns, pool string) string { return s.Prefix + ".result." + ns + "." + pool }

// Metrics is the root of the Event subjects of the workers of ns/pool
// (core NATS): each worker publishes on its own Events subject below it.
// Nothing is published on the root itself (sidecars before the per-worker
// subjects did; the activator ignores them).
func (s Subjects) Metrics(ns, pool string) string { return s.Prefix + ".metrics." + ns + "." + pool }

// Events is where worker of ns/pool publishes its Events (core NATS). The
// NATS auth callout grants each worker only its own, and the activator
// takes the worker's name from the subject: a worker cannot speak for a
// sibling (deregister it, mark it unready, keep a dead one alive).
func (s Subjects) Events(ns, pool, worker string) string { return s.Metrics(ns, pool) + "." + worker }

// Cancel is where worker hears cancels (core NATS).
func (s Subjects) Cancel(ns, pool, worker string) string {
	return s.Prefix + ".cancel." + ns + "." + pool + "." + worker
}

// DeadLetter is where the activator stores ns/pool's dead letters (JetStream).
func (s Subjects) DeadLetter(ns, pool string) string {
	return s.Prefix + ".deadletter." + ns + "." + pool
}

// Reply is the root of the sync reply subjects of ns/pool (core NATS): a
// sync caller's ReplyTo is Reply(ns, pool) + "." + <ingress replica token>
// + "." + <invocation ID> + "." + <the caller's random token>, so a worker
// may answer only its own pool's callers, and only the one whose
// invocation it was dispatched.
func (s Subjects) Reply(ns, pool string) string { return s.Prefix + ".reply." + ns + "." + pool }

// StreamSubjects are the subjects the invocation stream stores: only what
// the queue itself publishes. Metrics, cancel and reply are core NATS only:
// they are signals, not work. Results live in a stream of their own
// (ResultStreamSubjects): workers publish them, and a stream deduplicates
// Nats-Msg-Id across all its subjects, so a worker that could publish into
// the invocation stream could pre-claim the message ID of another tenant's
// invocation or dispatch and have it dropped as a duplicate.
func (s Subjects) StreamSubjects() []string {
	return []string{s.Prefix + ".invoke.>", s.Prefix + ".dispatch.>", s.Prefix + ".deadletter.>"}
}

// ResultStreamSubjects are the subjects of the results stream
// (ResultsStreamName): the only JetStream subjects a worker publishes on.
func (s Subjects) ResultStreamSubjects() []string { return []string{s.Prefix + ".result.>"} }

// ResultsStreamName is the results stream that goes with invocation stream
// stream.
func ResultsStreamName(stream string) string { return stream + "_RESULTS" }

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// ConsumerName is the durable JetStream consumer of a worker, named after
// its namespace, pool and name (characters outside [A-Za-z0-9_-] become
// '_'), so a restarted sidecar of the same Pod resumes its unacked work.
func ConsumerName(ns, pool, worker string) string {
	return unsafeName.ReplaceAllString(ns+"_"+pool+"_"+worker, "_")
}

// WorkerInbox is a worker's own inbox prefix (nats.CustomInboxPrefix):
// JetStream answers its API calls and publish acks there, and no other
// worker may listen to it.
func WorkerInbox(ns, pool, worker string) string {
	return "_INBOX_RP." + ns + "." + pool + "." + worker
}

// ValidateToken checks that a namespace, pool or worker name is usable as
// one subject token (Kubernetes names always are).
func ValidateToken(kind, v string) error {
	if v == "" {
		return fmt.Errorf("%s must not be empty", kind)
	}
	if strings.ContainsAny(v, ".*> \t\r\n") {
		return fmt.Errorf("%s %q must not contain '.', '*', '>' or whitespace", kind, v)
	}
	return nil
}

// Invocation is what ingress stores on invoke.<ns>.<pool>.
type Invocation struct {
	InvocationID   string            `json:"invocationID"`
	Namespace      string            `json:"namespace"`
	Pool           string            `json:"pool"`
	Mode           Mode              `json:"mode"`
	ContentType    string            `json:"contentType,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	Attributes     map[string]string `json:"attributes,omitempty"`
	Payload        json.RawMessage   `json:"payload,omitempty"`
	TimeoutSeconds int               `json:"timeoutSeconds,omitempty"`
	TTLSeconds     int               `json:"ttlSeconds,omitempty"`
	AcceptedAt     time.Time         `json:"acceptedAt"`
	// PayloadRef, when set, names the object that holds Payload (which is
	// then empty): a payload too big for one NATS message travels by
	// reference (internal/objects).
	PayloadRef *ObjectRef `json:"payloadRef,omitempty"`
	// MaxResultBytes bounds the framework's answer body (the queue's
	// -max-payload-bytes): a bigger one ends the invocation failed.
	MaxResultBytes int64 `json:"maxResultBytes,omitempty"`
	// ResultMsgMaxBytes is the largest result message the results stream
	// takes (the queue's -result-max-size): a result that does not fit in
	// it, or in the server's max_payload, sends its body by reference.
	ResultMsgMaxBytes int64 `json:"resultMsgMaxBytes,omitempty"`
	// MaxChunkBytes and MaxChunks bound a streamed answer (the chunks
	// stream's limits; 0: the framework package's defaults).
	MaxChunkBytes int   `json:"maxChunkBytes,omitempty"`
	MaxChunks     int64 `json:"maxChunks,omitempty"`
	// ReplyTo, when set, is a core NATS inbox the accepting ingress replica
	// listens on for the sync answer (a fast path next to the KV watch).
	ReplyTo string `json:"replyTo,omitempty"`
	// NamespaceUID is the UID of the namespace that accepted the invocation
	// (Record.NamespaceUID): a Record the activator writes from the message
	// keeps it. Empty without Kubernetes.
	NamespaceUID string `json:"namespaceUID,omitempty"`
	// CallbackURL is where the ingress asks for a completion callback; it
	// goes into the Record only, never into a message.
	CallbackURL string `json:"-"`
	// CallbackKeyID is the namespace's UID the callback is signed for
	// (CallbackStatus.KeyID); likewise in the Record only.
	CallbackKeyID string `json:"-"`
	// CallbackEvents are the callback's events (CallbackStatus.Events);
	// likewise in the Record only.
	CallbackEvents []CallbackEvent `json:"-"`
}

// Dispatch is what the activator sends a worker on dispatch.<ns>.<pool>.<worker>.
type Dispatch struct {
	Invocation
	Worker       string    `json:"worker"`
	Attempt      int       `json:"attempt"`
	DispatchedAt time.Time `json:"dispatchedAt"`
	// ResultToken is random per attempt and seen only by the worker it is
	// dispatched to: its Result must carry it back, so another worker of
	// the pool cannot finish the attempt.
	ResultToken string `json:"resultToken,omitempty"`
	// RetryOf is the attempt whose result the activator retried under the
	// pool's retry policy (0: none). A worker that ran that attempt runs
	// this one too; any other later attempt of an execution it holds is a
	// redelivery after it was declared lost, which it must not run again.
	RetryOf int `json:"retryOf,omitempty"`
}

// MsgID is the Nats-Msg-Id of invocation invocationID of namespace ns. The
// stream deduplicates message IDs across all subjects, and IDs are unique
// only per namespace: every message ID carries the namespace, so one
// tenant's ID never suppresses another's message.
func MsgID(ns, invocationID string) string { return ns + "/" + invocationID }

// DispatchMsgID names one attempt of an invocation (the sidecar's
// completed set). Results carry no Nats-Msg-Id: a worker chooses its
// message headers, so no ID it sends may be trusted to deduplicate anyone's
// message; a result stored twice is handled once by the activator (the
// Record's compare-and-set lets the first result of an attempt win).
func DispatchMsgID(ns, invocationID string, attempt int) string {
	return fmt.Sprintf("%s.%d", MsgID(ns, invocationID), attempt)
}

// DispatchPublishID is the Nats-Msg-Id the activator publishes a Dispatch
// with (distinct from DispatchMsgID, which older sidecars set on results).
func DispatchPublishID(ns, invocationID string, attempt int) string {
	return "dispatch." + DispatchMsgID(ns, invocationID, attempt)
}

// Result is what the sidecar publishes on result.<ns>.<pool> (and to ReplyTo).
type Result struct {
	InvocationID string    `json:"invocationID"`
	Namespace    string    `json:"namespace"`
	Pool         string    `json:"pool"`
	Worker       string    `json:"worker"`
	Attempt      int       `json:"attempt"`
	State        State     `json:"state"`
	Response     *Response `json:"response,omitempty"`
	Error        string    `json:"error,omitempty"`
	StartedAt    time.Time `json:"startedAt"`
	FinishedAt   time.Time `json:"finishedAt"`
	// ResultToken is the Dispatch's, echoed.
	ResultToken string `json:"resultToken,omitempty"`
	// ResponseBodyRef, when set, names the object that holds
	// Response.Body (which is then empty): a result too big for one NATS
	// message travels by reference.
	ResponseBodyRef *ObjectRef `json:"responseBodyRef,omitempty"`
}

// Response is the framework's answer as a Result and a Record carry it:
// messages.Response's fields, the same JSON (the sidecar converts one to
// the other, so a field the framework adds fails to compile there).
type Response struct {
	StatusCode  int               `json:"statusCode"`
	ContentType string            `json:"contentType,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	Body        json.RawMessage   `json:"body,omitempty"`
	Error       string            `json:"error,omitempty"`
}

// ObjectRef names an object of a pool's Object Store bucket
// (internal/objects) that holds a payload or a response body too big for
// one NATS message. Size and Digest are the reader's check: they come
// from whoever the reader trusts for the reference (the activator's
// Dispatch, the worker's token-checked Result), never from the object's
// own metadata, which any worker of the pool could rewrite.
type ObjectRef struct {
	Bucket string `json:"bucket"`
	Name   string `json:"name"`
	// NUID names the object's chunk subject ($O.<bucket>.C.<nuid>).
	NUID   string `json:"nuid"`
	Size   int64  `json:"size"`
	Chunks int    `json:"chunks"`
	// Digest is "SHA-256=<base64url of the sum>", as the Object Store's.
	Digest string `json:"digest"`
}

// EventType is the kind of a worker Event.
type EventType string

const (
	EventRegistered   EventType = "registered"
	EventHeartbeat    EventType = "heartbeat"
	EventStarted      EventType = "invocation.started"
	EventFinished     EventType = "invocation.finished"
	EventDeregistered EventType = "deregistered"
	// EventHandedBack: a draining worker gave back a dispatch
	// (InvocationID, Attempt) it never started and will not run (it termed
	// the message): the activator queues it again at once for another
	// worker, without counting it as an attempt that ran.
	EventHandedBack EventType = "invocation.handed_back"
)

// Event is what the sidecar publishes on metrics.<ns>.<pool>.<worker>
// (Events). Namespace, Pool and Worker must be the subject's.
type Event struct {
	Type        EventType `json:"type"`
	Pool        string    `json:"pool"`
	Worker      string    `json:"worker"`
	Namespace   string    `json:"namespace"`
	Concurrency int       `json:"concurrency"`
	InFlight    int       `json:"inFlight"`
	// Ready is true when the framework answers its health check.
	Ready bool `json:"ready"`
	// Draining is true once the sidecar stopped taking work (SIGTERM).
	Draining     bool      `json:"draining,omitempty"`
	InvocationID string    `json:"invocationID,omitempty"`
	Attempt      int       `json:"attempt,omitempty"`
	State        State     `json:"state,omitempty"`
	DurationMS   int64     `json:"durationMS,omitempty"`
	At           time.Time `json:"at"`
}

// AttemptHandedBack is the outcome of an attempt a draining worker gave
// back without starting it (an AttemptOutcome state, never an invocation's).
const AttemptHandedBack State = "handed_back"

// AttemptOutcome is how one attempt of an invocation ended (Record.Attempts).
type AttemptOutcome struct {
	Attempt int    `json:"attempt"`
	Worker  string `json:"worker,omitempty"`
	// State is the attempt's own end: succeeded, failed, timed_out,
	// cancelled, or handed_back (never run; it does not count as a retry).
	State State `json:"state"`
	// StatusCode is the framework response's status code (0: none).
	StatusCode int       `json:"statusCode,omitempty"`
	Error      string    `json:"error,omitempty"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	// RetryAt is set when the attempt was retried: the next attempt is not
	// dispatched before it.
	RetryAt *time.Time `json:"retryAt,omitempty"`
}

// Cancel asks a worker to cancel a running invocation.
type Cancel struct {
	InvocationID string `json:"invocationID"`
	Attempt      int    `json:"attempt"`
}

// Record is the invocation's entry in the KV bucket (key: invocation ID):
// its state and, once terminal, its result. It outlives the stream's
// duplicate window, so re-posting an ID finds it. Sequence (the
// invocation's stream sequence) is recorded with the first dispatch; Worker
// and Attempt name the current attempt, the only one a Dispatch is
// published for.
type Record struct {
	InvocationID string    `json:"invocationID"`
	Namespace    string    `json:"namespace"`
	Pool         string    `json:"pool"`
	Mode         Mode      `json:"mode"`
	State        State     `json:"state"`
	Worker       string    `json:"worker,omitempty"`
	Attempt      int       `json:"attempt,omitempty"`
	Stream       string    `json:"stream,omitempty"`
	Sequence     uint64    `json:"sequence,omitempty"`
	Response     *Response `json:"response,omitempty"`
	// ResponseBodyRef holds Response.Body when it is too big for the
	// Record: the ingress reads it into Response.Body (and clears this)
	// before a caller sees the Record.
	ResponseBodyRef *ObjectRef `json:"responseBodyRef,omitempty"`
	Error           string     `json:"error,omitempty"`
	// Retries counts the attempts run again after a failure the pool's
	// retry policy matches (runplane.io/max-retries).
	Retries int `json:"retries,omitempty"`
	// Attempts lists how each attempt ended, oldest first, when the pool
	// retries failures or an attempt was handed back unstarted (a draining
	// worker); empty otherwise.
	Attempts []AttemptOutcome `json:"attempts,omitempty"`
	// RequestHash is the ingress's SHA-256 of the canonical request
	// ("sha256:<hex>"): a re-post of the ID with another request is refused.
	RequestHash string    `json:"requestHash,omitempty"`
	AcceptedAt  time.Time `json:"acceptedAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
	// Callback is the completion callback, when the invocation or its
	// pool asked for one (queue/callback).
	Callback *CallbackStatus `json:"callback,omitempty"`
	// NamespaceUID is the UID of the namespace that accepted the
	// invocation: Records are keyed by namespace name, and a namespace
	// deleted and made again under that name (by another tenant maybe) has
	// another UID, so it cannot read, stream or cancel its predecessor's
	// Records. Empty without Kubernetes, and in Records written before it
	// was stamped (those stay readable by the name's current owner).
	NamespaceUID string `json:"namespaceUID,omitempty"`
	// StreamBytes is about what the invocation's message holds in the
	// invocation stream (each of its Dispatches as much again), written
	// with the Record: every ingress replica counts a namespace's share of
	// the stream from its Records (queue/ingress/internal/nsbytes). Never
	// answered.
	StreamBytes int64 `json:"streamBytes,omitempty"`
}

// Cached is a Record as a writer last read or wrote it, with its revision
// in the KV bucket (0: unknown). A writer that keeps it can update the Record without
// reading it first; a stale Cached costs one extra read, never a lost
// update.
type Cached struct {
	Record Record
	Rev    uint64
}

// IsJSON reports whether contentType is JSON ("" is: the default): a JSON
// payload or body is carried as itself, anything else as a JSON string of
// its bytes in standard base64.
func IsJSON(contentType string) bool {
	if contentType == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// PayloadSize is the size a payload or response body counts against the
// size limit: the JSON text for JSON, the decoded bytes for base64-carried
// binary content (so a raw HTTP body of n bytes counts n).
func PayloadSize(contentType string, raw json.RawMessage) int64 {
	if IsJSON(contentType) || len(raw) < 2 || raw[0] != '"' {
		return int64(len(raw))
	}
	s := raw[1 : len(raw)-1]
	n := int64(base64.StdEncoding.DecodedLen(len(s)))
	for i := len(s) - 1; i >= 0 && n > 0 && s[i] == '='; i-- {
		n-- // padding: DecodedLen counts whole groups
	}
	return n
}
