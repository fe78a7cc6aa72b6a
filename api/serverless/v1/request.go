package v1

import "encoding/json"

// InvokeRequest is the body of POST
// /v1/namespaces/{namespace}/pools/{pool}/invocations (and of the seed
// alias, which names the namespace in Namespace and the pool in
// ServerlessRequestID).
type InvokeRequest struct {
	Mode                Mode              `json:"mode"`
	Namespace           string            `json:"namespace,omitempty"`
	InvocationID        string            `json:"invocationID,omitempty"`
	ServerlessRequestID string            `json:"serverlessRequestID,omitempty"`
	Payload             json.RawMessage   `json:"payload,omitempty"`
	Headers             map[string]string `json:"headers,omitempty"`
	Attributes          map[string]string `json:"attributes,omitempty"`
	ContentType         string            `json:"contentType,omitempty"`
	TimeoutSeconds      int               `json:"timeoutSeconds,omitempty"`
	TTLSeconds          int               `json:"ttlSeconds,omitempty"`
	// CallbackURL asks for a completion callback.
	CallbackURL string `json:"callbackURL,omitempty" doc:"POST the terminal invocation here, signed (Runplane-Signature); default: the pool's runplane.io/callback-url"`
	// CallbackEvents chooses the callback's events.
	CallbackEvents []CallbackEvent `json:"callbackEvents,omitempty" doc:"the callback's events (Runplane-Event): start (the invocation began to run) and completed (terminal, always sent); default [completed]"`
	// Stream answers with server-sent events of the invocation's output
	// (as Accept: text/event-stream does); mode defaults to async.
	Stream bool `json:"stream,omitempty" doc:"answer with server-sent events: the chunks of a streaming framework as they come, then the result (as Accept: text/event-stream)"`
}
