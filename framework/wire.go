// Package framework is the contract between the worker sidecar and the
// user's framework: HTTP over a unix socket, GET /healthz and POST /invoke
// with the JSON envelopes below (unchanged from the seed design). It also
// offers a small Go helper to serve that contract.
package framework

import (
	"encoding/json"
	"time"
)

// Version is the envelope version the sidecar sends.
const Version = "v1"

// Request is the envelope the sidecar POSTs to the framework's invoke path.
type Request struct {
	Version      string `json:"version"`
	InvocationID string `json:"invocationID"`
	// Attempt is the attempt of the invocation this call runs (from 1):
	// with InvocationID the key of the idempotent invoke (idempotent.go).
	Attempt             int               `json:"attempt,omitempty"`
	ServerlessRequestID string            `json:"serverlessRequestID"`
	WorkerName          string            `json:"workerName"`
	WorkerNamespace     string            `json:"workerNamespace"`
	Mode                string            `json:"mode"`
	ContentType         string            `json:"contentType,omitempty"`
	Headers             map[string]string `json:"headers,omitempty"`
	Attributes          map[string]string `json:"attributes,omitempty"`
	Payload             json.RawMessage   `json:"payload,omitempty"`
	TimeoutSeconds      int               `json:"timeoutSeconds,omitempty"`
	DispatchedAt        time.Time         `json:"dispatchedAt"`
}

// Response is what the framework answers to an invocation.
type Response struct {
	StatusCode  int               `json:"statusCode"`
	ContentType string            `json:"contentType,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	Body        json.RawMessage   `json:"body,omitempty"`
	Error       string            `json:"error,omitempty"`
}
