package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/kit"
	"github.com/runplane/runplane/test/natsauth"
)

// Main is the TestMain of a suite on the whole stack (test/README.md): it
// starts the cluster as copts say, then the stack with the Options prepare
// returns (prepare may first change the cluster, e.g. a real node's
// taint), hands it to set, runs the tests and stops everything. A failed
// test dumps the control plane's logs and the components' log.
func Main(m *testing.M, copts cluster.Options, prepare func(context.Context, *cluster.Cluster) (Options, error), set func(*Stack)) {
	cluster.MainWith(m, copts, func(ctx context.Context, c *cluster.Cluster) (func(bool), error) {
		o, err := prepare(ctx, c)
		if err != nil {
			return nil, err
		}
		o.Logf = logf
		s, err := Start(ctx, c, o)
		if err != nil {
			return nil, err
		}
		set(s)
		return func(failed bool) {
			if failed {
				s.DumpLog(logf, 80)
			}
			s.Stop()
		}, nil
	})
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

// DumpLog passes the tail of the components' log to logf, and where the
// local workers' logs are.
func (s *Stack) DumpLog(logf func(format string, args ...any), lines int) {
	if b, err := os.ReadFile(s.LogPath); err == nil {
		logf("--- %s (webhook, queue, controllers, extender, local workers), last %d lines:\n%s", s.LogPath, lines, kit.Tail(string(b), lines))
	}
	if s.Workers != nil {
		logf("local worker logs: %s (set RUNPLANE_E2E_DIR to keep them)", filepath.Join(s.Cluster.Dir(), "workers"))
	}
}

// NATSConn connects as the queue's user until t ends: tests watch the
// sidecars' Events and the queue's Records as the queue sees them.
func (s *Stack) NATSConn(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	asQueue, err := s.Auth.QueueOption()
	require.NoError(t, err)
	return natsauth.Connect(t, s.NATSURL, append([]nats.Option{asQueue}, opts...)...)
}
