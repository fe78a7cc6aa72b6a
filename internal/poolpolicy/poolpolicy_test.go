package poolpolicy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/messages"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ann     map[string]string
		want    Execution
		wantErr string
	}{
		{name: "defaults: no retries", ann: nil, want: Execution{TimeoutSeconds: 300}},
		{name: "timeout", ann: map[string]string{api.AnnotationTimeoutSeconds: "900"}, want: Execution{TimeoutSeconds: 900, TimeoutSet: true}},
		{name: "timeout too long", ann: map[string]string{api.AnnotationTimeoutSeconds: "3601"}, wantErr: `annotation runplane.io/timeout-seconds: invalid value "3601": it must be an integer from 1 to 3600 (default 300)`},
		{name: "timeout not a number", ann: map[string]string{api.AnnotationTimeoutSeconds: "5m"}, wantErr: "runplane.io/timeout-seconds"},
		{name: "retries with defaults", ann: map[string]string{api.AnnotationMaxRetries: "2"},
			want: Execution{TimeoutSeconds: 300, Retry: Retry{MaxRetries: 2, On: []string{"error"}, Backoff: time.Second}}},
		{name: "retries explicit", ann: map[string]string{api.AnnotationMaxRetries: "3", api.AnnotationRetryOn: "error, timeout,503,5xx,503", api.AnnotationRetryBackoff: "250ms"},
			want: Execution{TimeoutSeconds: 300, Retry: Retry{MaxRetries: 3, On: []string{"error", "timeout", "503", "5xx"}, Backoff: 250 * time.Millisecond}}},
		{name: "backoff in seconds", ann: map[string]string{api.AnnotationMaxRetries: "1", api.AnnotationRetryBackoff: "5"},
			want: Execution{TimeoutSeconds: 300, Retry: Retry{MaxRetries: 1, On: []string{"error"}, Backoff: 5 * time.Second}}},
		{name: "zero retries", ann: map[string]string{api.AnnotationMaxRetries: "0"}, want: Execution{TimeoutSeconds: 300}},
		{name: "too many retries", ann: map[string]string{api.AnnotationMaxRetries: "11"}, wantErr: `annotation runplane.io/max-retries: invalid value "11": it must be an integer from 0 to 10`},
		{name: "negative retries", ann: map[string]string{api.AnnotationMaxRetries: "-1"}, wantErr: "runplane.io/max-retries"},
		{name: "retry-on without max-retries", ann: map[string]string{api.AnnotationRetryOn: "error"}, wantErr: `annotation runplane.io/retry-on: invalid value "error": it needs runplane.io/max-retries of at least 1`},
		{name: "backoff without max-retries", ann: map[string]string{api.AnnotationMaxRetries: "0", api.AnnotationRetryBackoff: "1s"}, wantErr: "annotation runplane.io/retry-backoff"},
		{name: "unknown retry-on", ann: map[string]string{api.AnnotationMaxRetries: "1", api.AnnotationRetryOn: "error,oops"}, wantErr: `annotation runplane.io/retry-on: invalid value "error,oops": a comma-separated list of "error"`},
		{name: "status out of range", ann: map[string]string{api.AnnotationMaxRetries: "1", api.AnnotationRetryOn: "600"}, wantErr: "HTTP status codes (100-599)"},
		{name: "empty retry-on", ann: map[string]string{api.AnnotationMaxRetries: "1", api.AnnotationRetryOn: ""}, wantErr: "runplane.io/retry-on"},
		{name: "backoff too short", ann: map[string]string{api.AnnotationMaxRetries: "1", api.AnnotationRetryBackoff: "1ms"}, wantErr: `annotation runplane.io/retry-backoff: invalid value "1ms": it must be a duration from 100ms to 1h0m0s`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.ann)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestMatches(t *testing.T) {
	r := Retry{MaxRetries: 1, On: []string{"error", "429", "5xx"}, Backoff: time.Second}
	for _, tc := range []struct {
		state messages.State
		code  int
		want  bool
	}{
		{messages.StateFailed, 0, true},
		{messages.StateFailed, 400, true},
		{messages.StateTimedOut, 0, false},
		{messages.StateSucceeded, 200, false},
		{messages.StateSucceeded, 503, true},
		{messages.StateSucceeded, 429, true},
		{messages.StateSucceeded, 404, false},
		{messages.StateCancelled, 503, false},
	} {
		require.Equal(t, tc.want, r.Matches(tc.state, tc.code), "%s %d", tc.state, tc.code)
	}
	require.False(t, Retry{}.Matches(messages.StateFailed, 0), "the zero policy retries nothing")
	require.True(t, Retry{MaxRetries: 1, On: []string{"timeout"}}.Matches(messages.StateTimedOut, 0))
}

func TestDelay(t *testing.T) {
	r := Retry{MaxRetries: 10, Backoff: time.Second}
	require.Equal(t, time.Second, r.Delay(1))
	require.Equal(t, 4*time.Second, r.Delay(3))
	require.Equal(t, MaxDelay, r.Delay(10))
	long := Retry{MaxRetries: 3, Backoff: 30 * time.Minute}
	require.Equal(t, 30*time.Minute, long.Delay(3), "a backoff above MaxDelay is not doubled past itself")
}
