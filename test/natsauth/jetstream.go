package natsauth

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// JetStream runs a plain JetStream nats-server (no accounts, no auth, no
// TLS) on loopback, its store in a directory of the test, until the test
// ends: for a test of one component's use of JetStream, where runplane's
// operator mode (Start) adds nothing. mutate, when set, adjusts the
// options first (users, TLS, a fixed port and store for a restart).
func JetStream(t testing.TB, mutate func(*server.Options)) *server.Server {
	t.Helper()
	o := &server.Options{JetStream: true, StoreDir: t.TempDir(), Port: -1, Host: "127.0.0.1", NoLog: true, NoSigs: true}
	if mutate != nil {
		mutate(o)
	}
	return run(t, o)
}

// FromConfig runs a nats-server from the configuration file conf (what
// only a file sets, such as JetStream's max_file_store, or the chart's
// included trust.conf) until the test ends.
func FromConfig(t testing.TB, conf string) *server.Server {
	t.Helper()
	o, err := server.ProcessConfigFile(conf)
	require.NoError(t, err, "nats configuration %s", conf)
	o.NoLog, o.NoSigs = true, true
	return run(t, o)
}

func run(t testing.TB, o *server.Options) *server.Server {
	t.Helper()
	srv, err := server.NewServer(o)
	require.NoError(t, err, "nats server")
	srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second), "nats not ready")
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv
}

// Connect connects to url with opts until the test ends.
func Connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	require.NoError(t, err, "connecting to %s", url)
	t.Cleanup(nc.Close)
	return nc
}

// FollowersServeDirectGets is how long after a replicated stream is made
// its followers may start answering direct gets: nats-server v2.15 checks
// every 2 s whether a follower is within 90% of its leader and only then
// subscribes it (jetstream_cluster.go, startDirectAccessMonitoring). Until
// then the leader answers every direct get, so a test of reads that a
// lagging follower answers must keep reading past it.
const FollowersServeDirectGets = 5 * time.Second

// Cluster runs n servers in runplane's operator mode (StartCluster, with
// exports) under a directory of the test until it ends, and returns their
// Auth.
func Cluster(t testing.TB, exports jwt.Exports, n int) (Auth, []*server.Server) {
	t.Helper()
	return ClusterWith(t, exports, n, Extra{})
}

// ClusterWith is Cluster with extra configuration for every server (such
// as JetStream's max_file_store).
func ClusterWith(t testing.TB, exports jwt.Exports, n int, extra Extra) (Auth, []*server.Server) {
	t.Helper()
	dir := t.TempDir()
	a, err := Write(filepath.Join(dir, "auth"))
	require.NoError(t, err)
	servers, err := StartClusterWith(filepath.Join(dir, "nats"), a, exports, n, extra)
	require.NoError(t, err, "nats cluster")
	for _, s := range servers {
		t.Cleanup(s.Shutdown)
	}
	return a, servers
}
