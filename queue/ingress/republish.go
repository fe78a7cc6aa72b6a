package ingress

import (
	"fmt"

	"github.com/runplane/runplane/internal/messages"
)

// refusedRepublish refuses the re-publish of a queued invocation whose
// Record carries no request hash: the re-post cannot be compared with what
// was accepted, so publishing it would let a caller who may only create
// invocations replace a queued invocation's payload by re-posting its ID.
// Such a Record was re-created by the activator from the stored message
// (or written by an ingress older than request hashes): its invocation is
// stored already, so nothing is lost by not publishing again.
func refusedRepublish(rec messages.Record, inv messages.Invocation) error {
	if rec.RequestHash != "" {
		return nil
	}
	return &conflictError{fmt.Sprintf("invocationID %s is queued, but its record holds no request hash to compare this request with "+
		"(re-created after it expired, or accepted by an older ingress): it is not published again; poll it by ID or use a new invocationID", inv.InvocationID)}
}
