package messages

import "time"

// CallbackStatus is the completion callback of an invocation
// (Record.Callback): where runplane POSTs the terminal Record, and how
// each delivery attempt went.
type CallbackStatus struct {
	// URL is the caller's callbackURL, or the pool's
	// runplane.io/callback-url.
	URL string `json:"url"`
	// KeyID is the UID of the namespace when the invocation was accepted:
	// the callback is signed with that namespace's key (NamespaceKey), not
	// that of one made later under its name. Empty: recorded before keys
	// followed the UID, or without Kubernetes.
	KeyID string `json:"keyID,omitempty"`
	// State is pending until the target answered 2xx (delivered) or every
	// attempt failed (failed).
	State CallbackState `json:"state"`
	// Attempts are the delivery attempts, oldest first.
	Attempts []CallbackAttempt `json:"attempts,omitempty"`
	// Events are the events asked for (CallbackEventStart,
	// CallbackEventCompleted); empty: completed only. State and Attempts
	// are the completed event's delivery, which is always made.
	Events []CallbackEvent `json:"events,omitempty"`
	// Start is the delivery of the start event (when the invocation began
	// to run), when asked for.
	Start *CallbackDelivery `json:"start,omitempty"`
}

// CallbackEvent is an event a callback is POSTed for (the Runplane-Event
// header), after Replicate's webhook events.
type CallbackEvent string

const (
	// CallbackEventStart: the invocation began to run (or ended before the
	// start was sent: it still goes first).
	CallbackEventStart CallbackEvent = "start"
	// CallbackEventCompleted: the invocation is terminal.
	CallbackEventCompleted CallbackEvent = "completed"
)

// CallbackDelivery is how one event's callback went.
type CallbackDelivery struct {
	State    CallbackState     `json:"state"`
	Attempts []CallbackAttempt `json:"attempts,omitempty"`
}

// CallbackState is how a callback's delivery stands.
type CallbackState string

const (
	CallbackPending   CallbackState = "pending"
	CallbackDelivered CallbackState = "delivered"
	CallbackFailed    CallbackState = "failed"
)

// CallbackAttempt is one POST of a completion callback.
type CallbackAttempt struct {
	At time.Time `json:"at"`
	// StatusCode is the target's answer (0: none: refused, unreachable).
	StatusCode int    `json:"statusCode,omitempty"`
	Error      string `json:"error,omitempty"`
	// NextAt is when the next attempt is due (absent: none follows).
	NextAt *time.Time `json:"nextAt,omitempty"`
}
