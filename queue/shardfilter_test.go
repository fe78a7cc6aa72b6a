package queue_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/queue/activator"
	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/queue/shard"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/natsauth"
)

// runningSignal is a slog handler that closes running when the activator
// logs that it runs (its consumers made).
type runningSignal struct {
	once    *sync.Once
	running chan struct{}
}

func (h runningSignal) Enabled(context.Context, slog.Level) bool { return true }
func (h runningSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "activator running" {
		h.once.Do(func() { close(h.running) })
	}
	return nil
}
func (h runningSignal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h runningSignal) WithGroup(string) slog.Handler      { return h }

// TestShardKeepsItsConsumersNamespaces: a shard's next owner, whose pool
// view lacks a namespace the previous owner's consumers filtered on (its
// informer not synced yet), keeps that namespace in both consumers: the
// invoke consumer would stop delivering its invocations, and the results
// stream (interest retention) would drop its results while no consumer
// filtered on it.
func TestShardKeepsItsConsumersNamespaces(t *testing.T) {
	ns := ""
	for k := 0; ns == ""; k++ {
		if c := fmt.Sprintf("team-%d", k); shard.Of(c, 2) == 0 {
			ns = c
		}
	}
	srv := natsauth.JetStream(t, nil)
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := t.Context()
	st, err := stream.Open(ctx, js, stream.Config{ActivatorShards: 2})
	require.NoError(t, err)

	run := func(pools pool.Static) (stop func()) {
		sig := runningSignal{once: &sync.Once{}, running: make(chan struct{})}
		a, err := activator.New(activator.Config{Store: st, NC: nc, Pools: pools, Shard: activator.Shard{Index: 0, Count: 2}, Logger: slog.New(sig)})
		require.NoError(t, err)
		actx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Start(actx) }()
		select {
		case <-sig.running:
		case <-time.After(30 * time.Second):
			require.FailNow(t, "the shard's activator did not start")
		}
		return func() { cancel(); require.NoError(t, <-done) }
	}
	filters := func() (invoke, results []string) {
		for _, c := range []struct {
			stream, name string
			out          *[]string
		}{{st.Config.Stream, "activator-0of2-invoke", &invoke}, {st.Config.ResultsStream, "activator-0of2-results", &results}} {
			cons, err := js.Consumer(ctx, c.stream, c.name)
			require.NoError(t, err)
			cfg := cons.CachedInfo().Config
			*c.out = append(slices.Clone(cfg.FilterSubjects), cfg.FilterSubject)
		}
		return invoke, results
	}

	run(pool.Static{pool.StaticKey(ns, "p"): pool.DefaultPolicy()})()
	inv, res := filters()
	require.Contains(t, inv, st.Subjects.Invoke(ns, "*"))
	require.Contains(t, res, st.Subjects.Result(ns, "*"))

	// The next owner does not know the pool (yet).
	stop := run(pool.Static{})
	defer stop()
	inv, res = filters()
	assert.Contains(t, inv, st.Subjects.Invoke(ns, "*"), "invoke consumer narrowed")
	assert.Contains(t, res, st.Subjects.Result(ns, "*"), "results consumer narrowed")
}
