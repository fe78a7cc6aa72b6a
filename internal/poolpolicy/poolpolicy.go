// Package poolpolicy parses a serverless pool's execution annotations (on
// the Pod template of its workload, api.AnnotationTimeoutSeconds and the
// retry policy api.AnnotationMaxRetries, AnnotationRetryOn,
// AnnotationRetryBackoff) once for the two readers that must agree on them:
// the webhook, which refuses a worker Pod with an invalid value and sizes
// its terminationGracePeriodSeconds, and the activator, which retries
// failed executions. It is pure: no I/O.
package poolpolicy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/messages"
)

// Bounds and defaults of the annotations.
const (
	// DefaultTimeoutSeconds and MaxTimeoutSeconds are the ingress's
	// defaults for an invocation's timeoutSeconds.
	DefaultTimeoutSeconds = 300
	MaxTimeoutSeconds     = 3600
	// MaxRetries bounds runplane.io/max-retries.
	MaxRetries = 10
	// DefaultBackoff is runplane.io/retry-backoff's default; MinBackoff and
	// MaxBackoffSetting bound it. A retry waits Backoff × 2^(n-1), at most
	// max(Backoff, MaxDelay).
	DefaultBackoff    = time.Second
	MinBackoff        = 100 * time.Millisecond
	MaxBackoffSetting = time.Hour
	MaxDelay          = 5 * time.Minute
	// DefaultRetryOn is runplane.io/retry-on's default.
	DefaultRetryOn = "error"
)

// Error is an invalid annotation: its key, its value and what is allowed.
type Error struct {
	Key, Value, Allowed string
}

func (e *Error) Error() string {
	return fmt.Sprintf("annotation %s: invalid value %q: %s", e.Key, e.Value, e.Allowed)
}

// Retry is a pool's retry policy for failed executions. The zero value
// retries nothing.
type Retry struct {
	// MaxRetries is how many more attempts a failed execution gets.
	MaxRetries int `json:"maxRetries,omitempty"`
	// On lists what is retried, canonical (see Matches): "error",
	// "timeout", "503", "5xx".
	On []string `json:"retryOn,omitempty"`
	// Backoff is the delay before the first retry.
	Backoff time.Duration `json:"retryBackoff,omitempty"`
}

// Execution is a pool's execution policy.
type Execution struct {
	// TimeoutSeconds is the pool's longest execution (and the default of
	// an invocation's timeoutSeconds); Set: the annotation gave it.
	TimeoutSeconds int  `json:"timeoutSeconds"`
	TimeoutSet     bool `json:"-"`
	Retry          Retry
}

// Parse reads the execution annotations of a pool's Pod template.
func Parse(ann map[string]string) (Execution, error) {
	e := Execution{TimeoutSeconds: DefaultTimeoutSeconds}
	if v, ok := ann[api.AnnotationTimeoutSeconds]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxTimeoutSeconds || strconv.Itoa(n) != v {
			return Execution{}, &Error{api.AnnotationTimeoutSeconds, v, fmt.Sprintf("it must be an integer from 1 to %d (default %d)", MaxTimeoutSeconds, DefaultTimeoutSeconds)}
		}
		e.TimeoutSeconds, e.TimeoutSet = n, true
	}
	r, err := ParseRetry(ann)
	if err != nil {
		return Execution{}, err
	}
	e.Retry = r
	return e, nil
}

// ParseRetry reads the retry annotations. Without runplane.io/max-retries
// (or with 0) nothing is retried, and the other two are refused: they
// would silently do nothing.
func ParseRetry(ann map[string]string) (Retry, error) {
	var r Retry
	if v, ok := ann[api.AnnotationMaxRetries]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > MaxRetries || strconv.Itoa(n) != v {
			return Retry{}, &Error{api.AnnotationMaxRetries, v, fmt.Sprintf("it must be an integer from 0 to %d (default 0: a failed execution is not retried)", MaxRetries)}
		}
		r.MaxRetries = n
	}
	on, onSet := ann[api.AnnotationRetryOn]
	bo, boSet := ann[api.AnnotationRetryBackoff]
	if r.MaxRetries == 0 {
		for _, k := range []struct {
			set      bool
			key, val string
		}{{onSet, api.AnnotationRetryOn, on}, {boSet, api.AnnotationRetryBackoff, bo}} {
			if k.set {
				return Retry{}, &Error{k.key, k.val, fmt.Sprintf("it needs %s of at least 1 (without it nothing is retried)", api.AnnotationMaxRetries)}
			}
		}
		return Retry{}, nil
	}
	if !onSet {
		on = DefaultRetryOn
	}
	list, err := parseOn(on)
	if err != nil {
		return Retry{}, err
	}
	r.On = list
	r.Backoff = DefaultBackoff
	if boSet {
		d, err := parseDuration(bo)
		if err != nil || d < MinBackoff || d > MaxBackoffSetting {
			return Retry{}, &Error{api.AnnotationRetryBackoff, bo, fmt.Sprintf("it must be a duration from %s to %s (e.g. 500ms, 2s, 1m) or a number of seconds (default %s)", MinBackoff, MaxBackoffSetting, DefaultBackoff)}
		}
		r.Backoff = d
	}
	return r, nil
}

const allowedOn = `a comma-separated list of "error" (the framework failed or answered an error), "timeout" (the execution ran past timeoutSeconds), HTTP status codes (100-599) of the framework's response and classes such as "5xx" (default "error")`

func parseOn(v string) ([]string, error) {
	var out []string
	for tok := range strings.SplitSeq(v, ",") {
		tok = strings.TrimSpace(tok)
		switch {
		case tok == "error" || tok == "timeout":
		case len(tok) == 3 && tok[1:] == "xx" && tok[0] >= '1' && tok[0] <= '5':
		default:
			n, err := strconv.Atoi(tok)
			if err != nil || n < 100 || n > 599 || strconv.Itoa(n) != tok {
				return nil, &Error{api.AnnotationRetryOn, v, allowedOn}
			}
		}
		if !slices.Contains(out, tok) {
			out = append(out, tok)
		}
	}
	return out, nil
}

func parseDuration(v string) (time.Duration, error) {
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	return time.ParseDuration(v)
}

// Enabled reports whether anything is retried.
func (r Retry) Enabled() bool { return r.MaxRetries > 0 }

// Matches reports whether an execution that ended in state with the
// framework's response status code (0: no response) is one the policy
// retries: "error" matches a failed execution, "timeout" one the sidecar
// timed out, a code or class the response's status code (whatever the
// state: a framework may answer 503 without an error). Cancelled and
// succeeded-without-a-listed-code executions never match.
func (r Retry) Matches(state messages.State, statusCode int) bool {
	if !r.Enabled() || state == messages.StateCancelled {
		return false
	}
	for _, on := range r.On {
		switch on {
		case "error":
			if state == messages.StateFailed {
				return true
			}
		case "timeout":
			if state == messages.StateTimedOut {
				return true
			}
		default:
			if statusCode == 0 {
				continue
			}
			if strings.HasSuffix(on, "xx") {
				if strconv.Itoa(statusCode/100) == on[:1] {
					return true
				}
			} else if strconv.Itoa(statusCode) == on {
				return true
			}
		}
	}
	return false
}

// Delay is how long retry n (1 for the first) waits after the failure:
// Backoff doubled per retry, at most max(Backoff, MaxDelay).
func (r Retry) Delay(n int) time.Duration {
	d := max(r.Backoff, MinBackoff)
	b := wait.Backoff{Duration: d, Factor: 2, Cap: max(d, MaxDelay), Steps: n - 1}
	for b.Steps > 0 {
		b.Step()
	}
	return b.Duration
}

// String is the policy as annotations would say it (for logs and errors).
func (r Retry) String() string {
	if !r.Enabled() {
		return "no retries"
	}
	return fmt.Sprintf("%s=%d, %s=%s, %s=%s", api.AnnotationMaxRetries, r.MaxRetries,
		api.AnnotationRetryOn, strings.Join(r.On, ","), api.AnnotationRetryBackoff, r.Backoff)
}
