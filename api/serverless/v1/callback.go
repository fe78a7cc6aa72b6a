package v1

import "time"

// Completion callbacks: runplane POSTs an Invocation as JSON to the
// callback URL, signed under the namespace's key (SigningKey).
const (
	// SignatureHeader is "t=<unix seconds>,v1=<hex HMAC-SHA256>", the MAC
	// over "<t>.<body>" with the namespace's key: the timestamp is signed,
	// so a receiver that refuses old ones stops replays. It may carry
	// several v1 MACs: accept when one verifies.
	SignatureHeader = "Runplane-Signature"
	// DeliveryHeader names the delivery: "<namespace>/<invocation ID>/<state>"
	// ("<namespace>/<invocation ID>/start" for the start event), the same
	// for every retry of it (receivers deduplicate on it).
	DeliveryHeader = "Runplane-Delivery"
	// EventHeader is the CallbackEvent the POST is for: "completed", or
	// "start" when asked for (InvokeRequest.CallbackEvents).
	EventHeader = "Runplane-Event"
)

// CallbackEvent is an event a callback is POSTed for.
type CallbackEvent string

const (
	// CallbackEventStart: the invocation began to run (or ended before the
	// start was sent: it still goes first).
	CallbackEventStart CallbackEvent = "start"
	// CallbackEventCompleted: the invocation is terminal.
	CallbackEventCompleted CallbackEvent = "completed"
)

// CallbackEvents are the values of CallbackEvent.
var CallbackEvents = []CallbackEvent{CallbackEventStart, CallbackEventCompleted}

// CallbackState is how a callback's delivery stands.
type CallbackState string

const (
	CallbackPending   CallbackState = "pending"
	CallbackDelivered CallbackState = "delivered"
	CallbackFailed    CallbackState = "failed"
)

// CallbackStates are the values of CallbackState.
var CallbackStates = []CallbackState{CallbackPending, CallbackDelivered, CallbackFailed}

// Callback is an invocation's completion callback and how its delivery
// went.
type Callback struct {
	URL string `json:"url" doc:"the invocation's callbackURL, or the pool's runplane.io/callback-url"`
	// KeyID names the key the callback is signed with (SigningKey.KeyID);
	// another than the one a receiver holds means its key is stale.
	KeyID string `json:"keyID,omitempty" doc:"the signing key's ID (getCallbackSigningKey's keyID): another than the receiver's means its key is stale"`
	// State is pending until the target answered 2xx (delivered) or every
	// attempt failed (failed): the completed event's delivery.
	State    CallbackState     `json:"state"`
	Attempts []CallbackAttempt `json:"attempts,omitempty"`
	// Events are the events asked for; empty: completed only.
	Events []CallbackEvent `json:"events,omitempty"`
	// Start is the start event's delivery, when asked for.
	Start *CallbackDelivery `json:"start,omitempty"`
}

// CallbackDelivery is how one event's callback went.
type CallbackDelivery struct {
	State    CallbackState     `json:"state"`
	Attempts []CallbackAttempt `json:"attempts,omitempty"`
}

// CallbackAttempt is one POST of a callback.
type CallbackAttempt struct {
	At         time.Time  `json:"at"`
	StatusCode int        `json:"statusCode,omitempty" doc:"the target's answer (0: none: refused, unreachable)"`
	Error      string     `json:"error,omitempty"`
	NextAt     *time.Time `json:"nextAt,omitempty" doc:"when the next attempt is due (absent: none follows)"`
}

// SigningKey is a namespace's callback signing key.
type SigningKey struct {
	Namespace string `json:"namespace"`
	Key       string `json:"key" doc:"the namespace's HMAC-SHA256 key, hex-encoded"`
	KeyID     string `json:"keyID,omitempty" doc:"the key's ID: this namespace's only; one deleted and made again under its name has another (callback.keyID in an invocation names the key its callback is signed with)"`
	Algorithm string `json:"algorithm" doc:"HMAC-SHA256"`
	Header    string `json:"header" doc:"the signature header: t=<unix seconds>,v1=<hex MAC of \"<t>.<body>\">"`
}
