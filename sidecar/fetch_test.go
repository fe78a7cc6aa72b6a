package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/test/natsauth"
)

// pullTap records the pull requests worker's sidecar makes on its consumer,
// as the NATS server sees them.
type pullTap struct {
	mu      sync.Mutex
	batches []int
	at      []time.Time
}

func (e *env) tapPulls(worker string) *pullTap {
	e.t.Helper()
	p := &pullTap{}
	subject := "$JS.API.CONSUMER.MSG.NEXT." + api.DefaultStreamName + "." + messages.ConsumerName(testNS, testPool, worker)
	sub, err := e.nc.Subscribe(subject, func(m *nats.Msg) {
		var req struct {
			Batch int `json:"batch"`
		}
		if err := json.Unmarshal(m.Data, &req); err != nil {
			e.t.Errorf("pull request %q: %v", m.Data, err)
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.batches = append(p.batches, req.Batch)
		p.at = append(p.at, time.Now())
	})
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(e.t, e.nc.Flush())
	return p
}

// seen is the pull requests so far: their batch sizes and times.
func (p *pullTap) seen() ([]int, []time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.batches...), append([]time.Time(nil), p.at...)
}

func (p *pullTap) count() int {
	b, _ := p.seen()
	return len(b)
}

// TestOneFetcherPullsForItsFreeSlots: the sidecar's one fetcher pulls as
// many dispatches as it has free slots in one request, so a busy worker
// makes fewer pulls than it runs calls and an idle one keeps one pull open,
// not one per slot (issue 33). The sidecar before made one pull of one
// dispatch per call and per slot: 24 or more pulls for the 24 calls, and 64
// pulls at once every FetchWait while idle.
func TestOneFetcherPullsForItsFreeSlots(t *testing.T) {
	t.Run("busy", func(t *testing.T) {
		e := newEnv(t)
		sock := socketPath(t)
		const conc, rounds = 8, 3
		started, gate := make(chan string, conc), make(chan struct{}, conc)
		echo := framework.Echo(framework.EchoOptions{})
		serveFramework(t, sock, func(ctx context.Context, r framework.Request) (framework.Response, error) {
			started <- r.InvocationID
			select {
			case <-gate:
			case <-ctx.Done():
				return framework.Response{}, ctx.Err()
			}
			return echo(ctx, r)
		})
		events, results := e.events(), e.results()
		pulls := e.tapPulls("w1")
		cfg := e.config("w1", sock)
		cfg.Concurrency, cfg.FetchWait = conc, time.Second
		e.startSidecar(cfg)
		waitEvent(t, events, "ready heartbeat", func(ev messages.Event) bool { return ev.Type == messages.EventHeartbeat && ev.Ready })
		require.Eventually(t, func() bool { return pulls.count() > 0 }, waitFor, tick, "the fetcher's first pull")

		for round := range rounds {
			for i := range conc {
				e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: fmt.Sprintf("r%d-%d", round, i)}})
			}
			// All of the round run at once: every slot is used.
			for range conc {
				select {
				case <-started:
				case <-time.After(waitFor):
					t.Fatalf("round %d: fewer than %d calls running at once", round, conc)
				}
			}
			for range conc {
				gate <- struct{}{}
			}
			for range conc {
				r := waitResult(t, results)
				require.Equal(t, messages.StateSucceeded, r.State, "%s: %s", r.InvocationID, r.Error)
			}
		}
		batches, _ := pulls.seen()
		t.Logf("%d pulls for %d calls, batch sizes %v", len(batches), conc*rounds, batches)
		assert.Less(t, len(batches), conc*rounds, "pulls for %d calls run %d at a time", conc*rounds, conc)
		for _, b := range batches {
			assert.LessOrEqual(t, b, conc, "a pull asks for more dispatches than the worker has slots")
		}
	})

	t.Run("idle", func(t *testing.T) {
		e := newEnv(t)
		sock := socketPath(t)
		serveFramework(t, sock, framework.Echo(framework.EchoOptions{}))
		events := e.events()
		pulls := e.tapPulls("w1")
		const conc, periods = 64, 5
		cfg := e.config("w1", sock)
		cfg.Concurrency = conc
		e.startSidecar(cfg)
		waitEvent(t, events, "ready heartbeat", func(ev messages.Event) bool { return ev.Type == messages.EventHeartbeat && ev.Ready })
		require.Eventually(t, func() bool { return pulls.count() > periods }, waitFor, tick, "%d pulls", periods+1)
		batches, at := pulls.seen()
		batches, at = batches[:periods+1], at[:periods+1]
		// Each pull is open for FetchWait before the next: periods of it
		// between the first pull and the last (a loaded machine only
		// stretches them), where one pull per slot would make them all at once.
		took := at[periods].Sub(at[0])
		t.Logf("%d pulls of an idle worker of concurrency %d in %v (fetch wait %v), batch sizes %v", periods+1, conc, took, cfg.FetchWait, batches)
		assert.GreaterOrEqual(t, took, periods*cfg.FetchWait*9/10, "an idle worker renews one pull per fetch wait")
		for _, b := range batches {
			assert.Equal(t, conc, b, "an idle worker's pull asks for every slot")
		}
	})
}

// A NATS whose JetStream limits cap a pull's batch (jetstream { limits {
// max_request_batch } }, an external NATS's setting) refuses a larger pull
// with 409: a worker of Concurrency 8 under a limit of 2 pulls within it
// and runs its work (it ran nothing before).
func TestPullsWithinTheServersBatchLimit(t *testing.T) {
	srv := natsauth.JetStream(t, func(o *server.Options) { o.JetStreamLimits.MaxRequestBatch = 2 })
	nc := natsauth.Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: api.DefaultStreamName, Subjects: subjects.StreamSubjects()})
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: messages.ResultsStreamName(api.DefaultStreamName), Subjects: subjects.ResultStreamSubjects()})
	require.NoError(t, err)
	e := &env{t: t, srv: srv, nc: nc, js: js}
	sock := socketPath(t)
	serveFramework(t, sock, framework.Echo(framework.EchoOptions{}))
	events, results := e.events(), e.results()
	cfg := e.config("w1", sock)
	cfg.Concurrency = 8
	e.startSidecar(cfg)
	waitEvent(t, events, "ready heartbeat", func(ev messages.Event) bool { return ev.Type == messages.EventHeartbeat && ev.Ready })
	e.dispatch("w1", messages.Dispatch{Invocation: messages.Invocation{InvocationID: "one"}})
	r := waitResult(t, results)
	require.Equal(t, messages.StateSucceeded, r.State)
}
