package natsauth

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// Attempt is something a client tries that the server must refuse: Try
// makes the request, Want is in the permissions violation the server
// sends back.
type Attempt struct {
	Name, Want string
	Try        func(ctx context.Context) error
}

// RequireRefused runs each attempt on nc as a subtest of t and requires
// the server's permissions violation naming its Want on violations (nc's
// asynchronous errors): a refused publish or subscribe is only told that
// way, so the violation is the verdict, not Try's error.
func RequireRefused(ctx context.Context, t *testing.T, nc *nats.Conn, violations <-chan error, attempts []Attempt) {
	t.Helper()
	for _, a := range attempts {
		t.Run(a.Name, func(t *testing.T) {
			actx, acancel := context.WithTimeout(ctx, time.Second)
			defer acancel()
			_ = a.Try(actx) // refused asynchronously: the violation below is the verdict
			require.NoError(t, nc.Flush())
			select {
			case err := <-violations:
				require.ErrorContains(t, err, "Permissions Violation")
				require.ErrorContains(t, err, a.Want)
			case <-ctx.Done():
				t.Fatal("no permission violation")
			}
		})
	}
}
