// Package messages is the wire contract of the serverless path between the
// queue service (ingress, activator) and the worker sidecar: the subjects,
// the JSON bodies published on them and the invocation states. Both sides
// import it; nothing here talks to NATS.
//
// Flow: ingress publishes an Invocation on invoke.<pool> (JetStream,
// Nats-Msg-Id = invocation ID) and records a Record in the KV bucket. The
// activator sends a Dispatch on dispatch.<pool>.<worker> (JetStream,
// Nats-Msg-Id = DispatchPublishID). The sidecar consumes its dispatch subject,
// acks in progress while the framework runs, publishes a Result on
// result.<pool> (JetStream, Nats-Msg-Id = DispatchMsgID), answers the sync
// caller on Dispatch.ReplyTo when set, then acks. Worker Events (register,
// heartbeat, started, finished, deregister) go to metrics.<pool> on core
// NATS. A Cancel goes to cancel.<pool>.<worker> on core NATS.
package messages

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/runplane/runplane/framework"
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
type Subjects struct{ Prefix string }

func (s Subjects) Invoke(pool string) string { return s.Prefix + ".invoke." + pool }
func (s Subjects) Dispatch(pool, worker string) string {
	return s.Prefix + ".dispatch." + pool + "." + worker
}
func (s Subjects) Result(pool string) string  { return s.Prefix + ".result." + pool }
func (s Subjects) Metrics(pool string) string { return s.Prefix + ".metrics." + pool }
func (s Subjects) Cancel(pool, worker string) string {
	return s.Prefix + ".cancel." + pool + "." + worker
}
func (s Subjects) DeadLetter(pool string) string { return s.Prefix + ".deadletter." + pool }

// StreamSubjects are the subjects the JetStream stream stores. Metrics and
// cancel are core NATS only: they are signals, not work.
func (s Subjects) StreamSubjects() []string {
	return []string{s.Prefix + ".invoke.>", s.Prefix + ".dispatch.>", s.Prefix + ".result.>", s.Prefix + ".deadletter.>"}
}

// ValidateToken checks that a pool or worker name is usable as one subject
// token (Kubernetes names always are).
func ValidateToken(kind, v string) error {
	if v == "" {
		return fmt.Errorf("%s must not be empty", kind)
	}
	if strings.ContainsAny(v, ".*> \t\r\n") {
		return fmt.Errorf("%s %q must not contain '.', '*', '>' or whitespace", kind, v)
	}
	return nil
}

// Invocation is what ingress stores on invoke.<pool>.
type Invocation struct {
	InvocationID   string            `json:"invocationID"`
	Pool           string            `json:"pool"`
	Mode           Mode              `json:"mode"`
	ContentType    string            `json:"contentType,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	Attributes     map[string]string `json:"attributes,omitempty"`
	Payload        json.RawMessage   `json:"payload,omitempty"`
	TimeoutSeconds int               `json:"timeoutSeconds,omitempty"`
	TTLSeconds     int               `json:"ttlSeconds,omitempty"`
	AcceptedAt     time.Time         `json:"acceptedAt"`
	// ReplyTo, when set, is a core NATS inbox the accepting ingress replica
	// listens on for the sync answer (a fast path next to the KV watch).
	ReplyTo string `json:"replyTo,omitempty"`
}

// Dispatch is what the activator sends a worker on dispatch.<pool>.<worker>.
type Dispatch struct {
	Invocation
	Worker       string    `json:"worker"`
	Attempt      int       `json:"attempt"`
	DispatchedAt time.Time `json:"dispatchedAt"`
}

// DispatchMsgID is the Nats-Msg-Id of a dispatch and of its result, so a
// retried publish of either is deduplicated by the stream.
func DispatchMsgID(invocationID string, attempt int) string {
	return fmt.Sprintf("%s.%d", invocationID, attempt)
}

// DispatchPublishID is the Nats-Msg-Id the activator publishes a Dispatch
// with. It must differ from DispatchMsgID, which the Result carries: one
// stream deduplicates message IDs across all its subjects, so a shared ID
// would drop the Result as a duplicate of its Dispatch.
func DispatchPublishID(invocationID string, attempt int) string {
	return "dispatch." + DispatchMsgID(invocationID, attempt)
}

// Result is what the sidecar publishes on result.<pool> (and to ReplyTo).
type Result struct {
	InvocationID string              `json:"invocationID"`
	Pool         string              `json:"pool"`
	Worker       string              `json:"worker"`
	Attempt      int                 `json:"attempt"`
	State        State               `json:"state"`
	Response     *framework.Response `json:"response,omitempty"`
	Error        string              `json:"error,omitempty"`
	StartedAt    time.Time           `json:"startedAt"`
	FinishedAt   time.Time           `json:"finishedAt"`
}

// EventType is the kind of a worker Event.
type EventType string

const (
	EventRegistered   EventType = "registered"
	EventHeartbeat    EventType = "heartbeat"
	EventStarted      EventType = "invocation.started"
	EventFinished     EventType = "invocation.finished"
	EventDeregistered EventType = "deregistered"
)

// Event is what the sidecar publishes on metrics.<pool>.
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
	InvocationID string              `json:"invocationID"`
	Pool         string              `json:"pool"`
	Mode         Mode                `json:"mode"`
	State        State               `json:"state"`
	Worker       string              `json:"worker,omitempty"`
	Attempt      int                 `json:"attempt,omitempty"`
	Stream       string              `json:"stream,omitempty"`
	Sequence     uint64              `json:"sequence,omitempty"`
	Response     *framework.Response `json:"response,omitempty"`
	Error        string              `json:"error,omitempty"`
	AcceptedAt   time.Time           `json:"acceptedAt"`
	UpdatedAt    time.Time           `json:"updatedAt"`
}
