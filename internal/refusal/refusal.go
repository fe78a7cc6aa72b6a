// Package refusal is runplane's one error for an authentication or
// authorization decision that says no (a queue ingress caller, a NATS
// worker, an accessor user, an SSH key, a Pod the scheduler extender will
// not act on): what the caller is told, with the HTTP status, the bounded
// reason a metric counts and when to try again. Any other error from a
// decision means it could not be made (an outage: 503, never cached).
package refusal

import (
	"fmt"
	"time"
)

// Error is a refusal.
type Error struct {
	// Status is the HTTP status for the caller; 0 outside HTTP (NATS, SSH).
	Status int
	// Reason is bounded (a metric label); empty when nothing counts it.
	Reason string
	// RetryAfter, when set, is when the caller may try again (a 429).
	RetryAfter time.Duration
	// Err says what was refused and why.
	Err error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// New is the refusal with status and reason saying fmt.Errorf(format, args...).
func New(status int, reason, format string, args ...any) *Error {
	return &Error{Status: status, Reason: reason, Err: fmt.Errorf(format, args...)}
}
