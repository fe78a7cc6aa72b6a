package activator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestPublishUntilKnown: a dispatch publish whose outcome is unknown (no
// response from the stream, a timeout) is retried as the same publish
// until the stream answers — never given up, so never requeued to another
// worker while it may be stored; one the stream refused is given up after
// a few tries.
func TestPublishUntilKnown(t *testing.T) {
	refused := &jetstream.APIError{Code: 503, ErrorCode: 10077, Description: "maximum messages exceeded"}
	for _, tc := range []struct {
		name      string
		errs      []error // the tries' errors, then success
		wantErr   error
		wantTries int
		// wantLogged: the unknown outcome was reported (once).
		wantLogged bool
	}{
		{"no response, then stored", []error{jetstream.ErrNoStreamResponse, jetstream.ErrNoStreamResponse, context.DeadlineExceeded, jetstream.ErrNoStreamResponse, context.DeadlineExceeded, jetstream.ErrNoStreamResponse}, nil, 7, true},
		{"refused", []error{refused, refused, refused, refused}, refused, 3, false},
		{"unknown, then refused", []error{context.DeadlineExceeded, context.DeadlineExceeded, context.DeadlineExceeded, refused}, refused, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now())
			tries := 0
			var unknown []error
			done := make(chan error, 1)
			go func() {
				_, err := publishUntilKnown(context.Background(), clk, func(context.Context) (*jetstream.PubAck, error) {
					tries++
					if tries <= len(tc.errs) {
						return nil, tc.errs[tries-1]
					}
					return &jetstream.PubAck{Sequence: 7}, nil
				}, func(err error) { unknown = append(unknown, err) })
				done <- err
			}()
			for {
				// Steps the fake clock past each backoff until the loop ends.
				select {
				case err := <-done:
					if tc.wantErr != nil {
						require.True(t, errors.Is(err, tc.wantErr), "err %v", err)
					} else {
						require.NoError(t, err)
					}
					require.Equal(t, tc.wantTries, tries, "publishes")
					require.Equal(t, tc.wantLogged, len(unknown) == 1, "unknown outcome reported: %v", unknown)
					return
				default:
				}
				if clk.HasWaiters() {
					clk.Step(2 * time.Second)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}
