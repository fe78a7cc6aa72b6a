// Package apiview is what tenants are shown of the queue's internal
// records: the ingress's answers (and the OpenAPI document and client
// generated from them) and the completion callbacks' bodies. A view is a
// type of its own, so a field added to an internal record reaches no
// tenant until it is added here on purpose.
package apiview

import (
	"time"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
)

// Record is messages.Record as its tenant sees it. Left out: Sequence,
// the invocation's position in the invocation stream all tenants share
// (two of a tenant's invocations counted everyone's in between).
type Record struct {
	InvocationID string              `json:"invocationID"`
	Namespace    string              `json:"namespace"`
	Pool         string              `json:"pool"`
	Mode         messages.Mode       `json:"mode"`
	State        messages.State      `json:"state"`
	Worker       string              `json:"worker,omitempty"`
	Attempt      int                 `json:"attempt,omitempty"`
	Stream       string              `json:"stream,omitempty"`
	Response     *framework.Response `json:"response,omitempty"`
	// ResponseBodyRef holds Response.Body when it is too big for the
	// Record; the ingress reads it into Response.Body before answering.
	ResponseBodyRef *messages.ObjectRef       `json:"responseBodyRef,omitempty"`
	Error           string                    `json:"error,omitempty"`
	Retries         int                       `json:"retries,omitempty"`
	Attempts        []messages.AttemptOutcome `json:"attempts,omitempty"`
	RequestHash     string                    `json:"requestHash,omitempty"`
	AcceptedAt      time.Time                 `json:"acceptedAt"`
	UpdatedAt       time.Time                 `json:"updatedAt"`
	Callback        *messages.CallbackStatus  `json:"callback,omitempty"`
	NamespaceUID    string                    `json:"namespaceUID,omitempty"`
}

// NewRecord is r's view.
func NewRecord(r messages.Record) Record {
	return Record{InvocationID: r.InvocationID, Namespace: r.Namespace, Pool: r.Pool, Mode: r.Mode, State: r.State, Worker: r.Worker,
		Attempt: r.Attempt, Stream: r.Stream, Response: r.Response, ResponseBodyRef: r.ResponseBodyRef, Error: r.Error, Retries: r.Retries,
		Attempts: r.Attempts, RequestHash: r.RequestHash, AcceptedAt: r.AcceptedAt, UpdatedAt: r.UpdatedAt, Callback: r.Callback,
		NamespaceUID: r.NamespaceUID}
}
