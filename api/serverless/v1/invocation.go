package v1

import (
	"encoding/json"
	"time"
)

// Mode is how the caller waits for the result.
type Mode string

const (
	ModeSync  Mode = "sync"
	ModeAsync Mode = "async"
)

// Modes are the values of Mode.
var Modes = []Mode{ModeSync, ModeAsync}

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

// States are the values of State, in the order an invocation goes through
// them.
var States = []State{StateQueued, StateDispatched, StateRunning, StateSucceeded, StateFailed, StateTimedOut, StateCancelled, StateDeadLettered}

// Terminal reports whether s is a final state.
func (s State) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateTimedOut, StateCancelled, StateDeadLettered:
		return true
	}
	return false
}

// Invocation is an invocation's state and, once terminal, its result: the
// answer of GET, cancel and a sync invoke, the result event of a stream and
// the body of a completion callback.
type Invocation struct {
	InvocationID string `json:"invocationID"`
	Namespace    string `json:"namespace"`
	Pool         string `json:"pool"`
	Mode         Mode   `json:"mode"`
	State        State  `json:"state"`
	Worker       string `json:"worker,omitempty" doc:"the Pod of the pool running (or that ran) the current attempt"`
	Attempt      int    `json:"attempt,omitempty" doc:"the current attempt, from 1 (0: not dispatched yet)"`
	// Response is the framework's answer, once the invocation succeeded
	// (or failed with an answer).
	Response *Response `json:"response,omitempty"`
	Error    string    `json:"error,omitempty" doc:"why the invocation did not succeed"`
	Retries  int       `json:"retries,omitempty" doc:"attempts run again after a failure the pool's retry policy matches (runplane.io/max-retries)"`
	// Attempts lists how each attempt ended, oldest first, when the pool
	// retries failures or an attempt was handed back unstarted.
	Attempts   []Attempt `json:"attempts,omitempty"`
	AcceptedAt time.Time `json:"acceptedAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
	// Callback is the completion callback, when one was asked for.
	Callback *Callback `json:"callback,omitempty"`
}

// Response is the framework's answer to an invocation.
type Response struct {
	StatusCode  int               `json:"statusCode"`
	ContentType string            `json:"contentType,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	// Body is JSON as itself, other content as a JSON string of its bytes
	// in standard base64 (ContentType says which).
	Body  json.RawMessage `json:"body,omitempty"`
	Error string          `json:"error,omitempty"`
}

// AttemptState is how one attempt ended: a terminal State but
// dead_lettered, or handed_back.
type AttemptState string

const (
	AttemptSucceeded AttemptState = "succeeded"
	AttemptFailed    AttemptState = "failed"
	AttemptTimedOut  AttemptState = "timed_out"
	AttemptCancelled AttemptState = "cancelled"
	// AttemptHandedBack: a draining worker gave the attempt back without
	// starting it; it does not count as a retry.
	AttemptHandedBack AttemptState = "handed_back"
)

// AttemptStates are the values of AttemptState.
var AttemptStates = []AttemptState{AttemptSucceeded, AttemptFailed, AttemptTimedOut, AttemptCancelled, AttemptHandedBack}

// Attempt is how one attempt of an invocation ended.
type Attempt struct {
	Attempt    int          `json:"attempt"`
	Worker     string       `json:"worker,omitempty"`
	State      AttemptState `json:"state"`
	StatusCode int          `json:"statusCode,omitempty" doc:"the framework's status code (0: none)"`
	Error      string       `json:"error,omitempty"`
	StartedAt  time.Time    `json:"startedAt,omitzero"`
	FinishedAt time.Time    `json:"finishedAt,omitzero"`
	// RetryAt is set when the attempt was retried: the next attempt is not
	// dispatched before it.
	RetryAt *time.Time `json:"retryAt,omitempty"`
}

// Ack is the answer to an accepted async invocation (202).
type Ack struct {
	InvocationID string    `json:"invocationID"`
	Namespace    string    `json:"namespace"`
	Pool         string    `json:"pool"`
	Duplicate    bool      `json:"duplicate" doc:"the invocation ID was accepted before with the same request: nothing new was queued"`
	State        State     `json:"state"`
	AcceptedAt   time.Time `json:"acceptedAt"`
}
