package natsauth_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/natsauth"
)

// TestClusterSurvivesLeaderLoss: the kit's cluster is the chart's default
// NATS — three servers fsyncing every write (sync_interval always), routes
// verified TLS — and a stream at three replicas keeps taking writes and
// keeps what it acknowledged when its leader's server goes.
func TestClusterSurvivesLeaderLoss(t *testing.T) {
	a, servers := natsauth.Cluster(t, queue.WorkerExports(stream.Config{}), 3)
	for _, s := range servers {
		require.True(t, s.JetStreamConfig().SyncAlways, "server %s does not fsync before acknowledging", s.Name())
	}
	opt, err := a.QueueOption()
	require.NoError(t, err)
	nc, err := nats.Connect(natsauth.ClientURLs(servers), opt)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KIT", Subjects: []string{"kit.>"}, Storage: jetstream.FileStorage, Replicas: 3})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "kit.a", []byte("before"))
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.Len(t, info.Cluster.Replicas, 2)
	for _, s := range servers {
		if s.Name() == info.Cluster.Leader {
			s.Shutdown()
		}
	}
	require.Eventually(t, func() bool {
		_, err := js.Publish(ctx, "kit.a", []byte("after"), jetstream.WithRetryAttempts(0))
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "no write after the stream leader's server went")
	info, err = st.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, info.State.Msgs)
}
