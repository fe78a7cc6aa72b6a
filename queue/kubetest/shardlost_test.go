package kubetest_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/shard"
	"github.com/runplane/runplane/test/natsauth"
	"github.com/runplane/runplane/test/scrape"
)

// cut is a replica's access to the API server, which the test can cut:
// every request then fails at once, as behind a partition (its watches
// already open go on).
type cut struct{ off atomic.Bool }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (c *cut) config() *rest.Config {
	cfg := rest.CopyConfig(env.RESTConfig())
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if c.off.Load() {
				return nil, errors.New("test: this replica's API access is cut")
			}
			return rt.RoundTrip(r)
		})
	})
	return cfg
}

// dispatches records a replica's "activator dispatch" spans.
func dispatches(t *testing.T) (*tracetest.SpanRecorder, func(*queue.Config)) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { assert.NoError(t, tp.Shutdown(context.Background())) })
	return rec, func(c *queue.Config) { c.TracerProvider = tp }
}

// dispatchTimes are the start and end of every dispatch span rec ended for
// namespace ns.
func dispatchTimes(rec *tracetest.SpanRecorder, ns string) (starts, ends []time.Time) {
	for _, s := range rec.Ended() {
		if s.Name() != "activator dispatch" {
			continue
		}
		for _, a := range s.Attributes() {
			if a.Key == attribute.Key("runplane.namespace") && a.Value.AsString() == ns {
				starts, ends = append(starts, s.StartTime()), append(ends, s.EndTime())
			}
		}
	}
	return starts, ends
}

// TestShardLostLeaseStopsDispatching cuts the API access of the replica
// running a busy shard: its Lease renewals fail. It must stop dispatching
// within the renew deadline of its last renewal — before the other
// replica may take the Lease, a Lease duration after that renewal — and
// its Run ends with shard.ErrLost; the other takes the shard and every
// invocation succeeds. Both sides' times: the cut replica's dispatch spans,
// its last renewal and the other's acquisition as the Lease recorded them
// (one watch of the Lease; one clock, this process's). On the release
// before, the cut replica dispatched until client-go noticed the failed
// renewals, a retry period later (and then drained).
func TestShardLostLeaseStopsDispatching(t *testing.T) {
	const renewDeadline = shardLeaseDuration * 7 / 10
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	leaseNS := "shard-lost-leases"
	require.NoError(t, env.CreateNamespace(ctx, leaseNS))
	nats := natsauth.JetStream(t, nil)
	scrapers, err := scrape.New(ctx, env)
	require.NoError(t, err)
	nss := shardNamespaces("lost", 2, 2)
	for _, ns := range nss {
		shardPool(ctx, t, nats.ClientURL(), ns)
	}

	var api cut
	rec0, traced0 := dispatches(t)
	rec1, traced1 := dispatches(t)
	r0 := shardReplica(t, nats.ClientURL(), leaseNS, "r0", 2, traced0, func(c *queue.Config) { c.RESTConfig = api.config() })
	r1 := shardReplica(t, nats.ClientURL(), leaseNS, "r1", 2, traced1)
	require.Eventually(t, settledShards(ctx, t, leaseNS, 2, 1, scrapers.Reader, r0, r1), 90*time.Second, 200*time.Millisecond,
		"a shard each: %v", holders(ctx, t, leaseNS, 2))
	s := 0
	if holders(ctx, t, leaseNS, 2)[1] == r0.id {
		s = 1
	}
	ns, leaseName := nss[s], shard.LeaseName(shard.DefaultLeaseName, s, 2)

	// Every write of r0's shard Lease from here on.
	w, err := env.Client().CoordinationV1().Leases(leaseNS).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + leaseName})
	require.NoError(t, err)
	var specsMu sync.Mutex
	var specs []coordv1.LeaseSpec
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			if l, ok := ev.Object.(*coordv1.Lease); ok {
				specsMu.Lock()
				specs = append(specs, l.Spec)
				specsMu.Unlock()
			}
		}
	}()

	// Load on r0's shard, through r1's ingress, until the end.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	var sent atomic.Int64
	for g := range 4 {
		load.Go(func() {
			for k := 0; loadCtx.Err() == nil; k++ {
				invokeOnce(t, r1.q, ns, fmt.Sprintf("load-%d-%d", g, k))
				sent.Add(1)
			}
		})
	}
	require.Eventually(t, func() bool { starts, _ := dispatchTimes(rec0, ns); return len(starts) >= 20 }, 30*time.Second, 50*time.Millisecond,
		"r0 dispatches %s", ns)

	r0.q.Expect(shard.ErrLost)
	api.off.Store(true)
	require.Eventually(t, settledShards(ctx, t, leaseNS, 2, 2, scrapers.Reader, r1), 60*time.Second, 200*time.Millisecond,
		"r1 takes r0's shard: %v", holders(ctx, t, leaseNS, 2))
	err = r0.q.Stop()
	require.ErrorIs(t, err, shard.ErrLost, "r0 stopped for its lost Lease")
	// r1 dispatches in the shard it took.
	var acquired time.Time
	require.Eventually(t, func() bool {
		specsMu.Lock()
		defer specsMu.Unlock()
		for _, sp := range specs {
			if ptr.Deref(sp.HolderIdentity, "") == r1.id && sp.AcquireTime != nil {
				acquired = sp.AcquireTime.Time
				break
			}
		}
		starts, _ := dispatchTimes(rec1, ns)
		return !acquired.IsZero() && len(starts) > 0 && starts[len(starts)-1].After(acquired)
	}, 30*time.Second, 100*time.Millisecond, "r1 dispatches %s", ns)
	stopLoad()
	load.Wait()
	w.Stop()
	<-watched

	var renewed time.Time // r0's last renewal, as it wrote it
	for _, sp := range specs {
		if ptr.Deref(sp.HolderIdentity, "") == r0.id && sp.RenewTime != nil && sp.RenewTime.After(renewed) {
			renewed = sp.RenewTime.Time
		}
	}
	require.False(t, renewed.IsZero(), "the watch saw r0 renew")
	starts, ends := dispatchTimes(rec0, ns)
	require.NotEmpty(t, starts)
	lastStart, lastEnd := starts[0], ends[0]
	for i := range starts {
		lastStart, lastEnd = maxTime(lastStart, starts[i]), maxTime(lastEnd, ends[i])
	}
	t.Logf("r0 renewed at +0, its last dispatch started at %s and ended at %s, r1 acquired at %s (renew deadline %s, lease %s); %d invocations",
		lastStart.Sub(renewed), lastEnd.Sub(renewed), acquired.Sub(renewed), renewDeadline, shardLeaseDuration, sent.Load())
	// The margin, half of what is left of the Lease after the renew
	// deadline: a dispatch already under way when the fence fired, and the
	// fence's timer firing late on a loaded machine (CI runs at load 10+).
	// The code before the fence dispatched until +4.5 s, past it.
	margin := (shardLeaseDuration - renewDeadline) / 2
	assert.Less(t, lastStart.Sub(renewed), renewDeadline+margin, "r0 stopped dispatching within the renew deadline of its last renewal")
	assert.True(t, lastEnd.Before(acquired), "r0's last dispatch (ended %s) before r1 took the shard (%s)", lastEnd, acquired)
	assert.GreaterOrEqual(t, acquired.Sub(renewed), shardLeaseDuration, "r1 took the Lease a Lease duration after r0's last renewal at the earliest")
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
