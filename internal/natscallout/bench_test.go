package natscallout

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/api"
)

// BenchmarkWorkerRoundTrip is one invocation's NATS work as the sidecar
// does it: the queue stores a dispatch, the worker pulls it, publishes its
// result (JetStream ack) and acks the dispatch. "baseline" runs the
// worker's side as a user of RUNPLANE, as every worker was placed before
// accounts; "own-account" through the imports of its own account, as now.
func BenchmarkWorkerRoundTrip(b *testing.B) {
	srv, a := startServer(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	alice := Identity{Name: "team-a/echo-1", Namespace: "team-a", Pool: "echo", Worker: "echo-1", Expires: time.Now().Add(time.Hour)}
	internal, _, _ := serveCallout(b, ctx, srv, a, &Responder{MaxTTL: time.Hour, Clock: clock.RealClock{}, Auth: tokens{"alice": alice}}, ServeOptions{})
	ijs, err := jetstream.New(internal)
	require.NoError(b, err)
	_, err = ijs.CreateStream(ctx, jetstream.StreamConfig{Name: "RS", Subjects: []string{"rs.dispatch.>"}})
	require.NoError(b, err)
	_, err = ijs.CreateStream(ctx, jetstream.StreamConfig{Name: "RS_RESULTS", Subjects: []string{"rs.result.>"}})
	require.NoError(b, err)
	own := testLayout(alice)
	_, err = ijs.CreateOrUpdateConsumer(ctx, own.Stream, jetstream.ConsumerConfig{
		Durable: own.Consumer, FilterSubject: own.Dispatch, AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(b, err)

	asQueue, err := a.QueueOption()
	require.NoError(b, err)
	for _, tc := range []struct {
		name    string
		connect func() (*nats.Conn, jetstream.JetStream, error)
	}{
		{name: "baseline", connect: func() (*nats.Conn, jetstream.JetStream, error) {
			nc, err := nats.Connect(srv.ClientURL(), asQueue)
			if err != nil {
				return nil, nil, err
			}
			js, err := jetstream.New(nc)
			return nc, js, err
		}},
		{name: "own-account", connect: func() (*nats.Conn, jetstream.JetStream, error) {
			nc, err := dial(srv.ClientURL(), a.TLSOption(), nats.Token("alice"), nats.CustomInboxPrefix(own.Inbox))
			if err != nil {
				return nil, nil, err
			}
			js, err := jetstream.NewWithAPIPrefix(nc, api.WorkerJSAPIPrefix)
			return nc, js, err
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			nc, js, err := tc.connect()
			require.NoError(b, err)
			defer nc.Close()
			cons, err := js.Consumer(ctx, own.Stream, own.Consumer)
			require.NoError(b, err)
			b.ResetTimer()
			for range b.N {
				_, err := ijs.Publish(ctx, own.Dispatch, []byte("work"))
				require.NoError(b, err)
				msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
				require.NoError(b, err)
				_, err = js.Publish(ctx, own.Publish[0], []byte("result"))
				require.NoError(b, err)
				require.NoError(b, msg.Ack())
			}
		})
	}
}
