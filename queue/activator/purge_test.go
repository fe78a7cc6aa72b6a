package activator

import (
	"io"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/activator/internal/state"
	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/natsauth"
)

// TestNoAckFloorFromAConsumerBeingMadeAgain: recreate counts the invoke
// consumer's generation up before it deletes the old consumer, so a purge
// round reading the ack floor meanwhile reads the old consumer's (review
// H3). The generation is odd while the consumer is made again: no floor
// read then, or read across it, is used.
func TestNoAckFloorFromAConsumerBeingMadeAgain(t *testing.T) {
	ctx := t.Context()
	nc, js, st := realStore(t)
	a := storeActivator(t, nc, st, slog.New(slog.NewTextHandler(io.Discard, nil)))

	// The invoke consumer has acked 3 messages.
	for range 3 {
		_, err := js.Publish(ctx, st.Subjects.Invoke("ns", "p"), []byte("{}"))
		require.NoError(t, err)
	}
	ackInvoked(t, js, st, a, 3)
	read := func() uint64 {
		var err error
		a.ackFloor, a.ackFloorGen, err = a.invokeAckFloor(ctx)
		require.NoError(t, err)
		return a.usableAckFloor()
	}
	require.Equal(t, uint64(3), read(), "the current consumer's floor")

	d := &durable{a: a, name: "invoke"}
	d.cfg.Durable = a.cfg.Shard.consumerPrefix(a.cfg.ConsumerPrefix) + "-invoke"
	done := d.remaking()
	require.Zero(t, read(), "read while the consumer is made again: the old one's")
	done()
	require.Zero(t, a.usableAckFloor(), "read before it was made again")
	require.Equal(t, uint64(3), read())
	// A floor read at one generation is not used after the consumer was
	// made again, even with no read in between (the odd check alone kept
	// the old floor: second review).
	d.remaking()()
	require.Zero(t, a.usableAckFloor(), "read before the consumer was made again, used after")
}

// realStore is the invocation stream and Records of a real nats-server of
// the test's own, with the connection and JetStream context that reach it.
func realStore(t *testing.T) (*nats.Conn, jetstream.JetStream, *stream.Store) {
	t.Helper()
	nc := natsauth.Connect(t, natsauth.JetStream(t, nil).ClientURL())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := stream.Open(t.Context(), js, stream.Config{})
	require.NoError(t, err)
	return nc, js, st
}

// storeActivator is an activator on st, its state made as a start makes
// it, that logs to log.
func storeActivator(t *testing.T, nc *nats.Conn, st *stream.Store, log *slog.Logger) *Activator {
	t.Helper()
	a, err := New(Config{Store: st, NC: nc, Pools: pool.Static{}, Logger: log, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	a.st = state.New(a.cfg.Decisions, a.cfg.Clock)
	return a
}

// heldInvocation publishes the first message of st's stream, invocation a
// of ns/p, and has a's state hold it as the invoke consumer's delivery
// would.
func heldInvocation(t *testing.T, a *Activator, js jetstream.JetStream, st *stream.Store) *state.Item {
	t.Helper()
	_, err := js.Publish(t.Context(), st.Subjects.Invoke("ns", "p"), []byte("{}"))
	require.NoError(t, err)
	it := &state.Item{Inv: messages.Invocation{InvocationID: "a", Namespace: "ns", Pool: "p"}, Seq: 1}
	a.locked(func(s *state.State) {
		s.Accept(it.Inv, 1)
		require.True(t, s.Enqueue(it))
	})
	return it
}

// ackInvoked makes a's invoke consumer (on ns/p's subject) and acks its
// first n messages there, as the activator does once it has taken them in.
func ackInvoked(t *testing.T, js jetstream.JetStream, st *stream.Store, a *Activator, n int) {
	t.Helper()
	c, err := js.CreateOrUpdateConsumer(t.Context(), st.Config.Stream, jetstream.ConsumerConfig{Durable: a.cfg.Shard.consumerPrefix(a.cfg.ConsumerPrefix) + "-invoke",
		AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: st.Subjects.Invoke("ns", "p")})
	require.NoError(t, err)
	batch, err := c.FetchNoWait(n)
	require.NoError(t, err)
	acked := 0
	for m := range batch.Messages() {
		require.NoError(t, m.DoubleAck(t.Context()))
		acked++
	}
	require.Equal(t, n, acked, "messages acked")
}
