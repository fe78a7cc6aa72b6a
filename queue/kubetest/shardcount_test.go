package kubetest_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/queue/shard"
	"github.com/runplane/runplane/test/natsauth"
	"github.com/runplane/runplane/test/scrape"
)

// shardLease matches a shard Lease's name: its index (and, since the
// count is in the names, the count).
var shardLease = regexp.MustCompile("^" + regexp.QuoteMeta(shard.DefaultLeaseName) + `-(\d+)(?:of\d+)?$`)

// ownership follows every Lease of a namespace through a watch (the API
// server's order of writes) and records each instant at which one
// namespace had two owners: a shard Lease held by a replica of one shard
// count and another held by a replica of another count whose shard holds
// the same namespace. A Lease is held from its acquisition to its release,
// which the replicas write only after the shard drained: what it holds is
// a superset of what runs.
type ownership struct {
	countOf func(identity string) int // a replica's shard count
	nss     []string

	mu       sync.Mutex
	held     map[string]string // Lease → holder
	active   string            // the members Lease's active count
	overlaps []string
	seen     map[int]bool // shard counts seen holding a Lease
}

func (o *ownership) observe(l *coordv1.Lease, deleted bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.held[l.Name] = ptr.Deref(l.Spec.HolderIdentity, "")
	if deleted {
		delete(o.held, l.Name)
	}
	if l.Name == shard.MembersLeaseName(shard.DefaultLeaseName) {
		o.active = l.Annotations["runplane.io/active-shards"]
	}
	type owner struct {
		holder, lease string
		count         int
	}
	for _, ns := range o.nss {
		var owners []owner
		for name, holder := range o.held {
			if holder == "" {
				continue
			}
			n := o.countOf(holder)
			m := shardLease.FindStringSubmatch(name)
			switch {
			case name == shard.DefaultLeaseName && n == 1 && o.active == "1":
				// The unsharded activator runs on the manager's Lease
				// holder, only while 1 is the active count.
				o.seen[n] = true
				owners = append(owners, owner{holder, name, n})
			case m != nil:
				o.seen[n] = true
				if i, _ := strconv.Atoi(m[1]); shard.Of(ns, n) == i {
					owners = append(owners, owner{holder, name, n})
				}
			}
		}
		for _, a := range owners {
			for _, b := range owners {
				if a.count < b.count && len(o.overlaps) < 10 { // the first few say it
					o.overlaps = append(o.overlaps, fmt.Sprintf("rv %s: namespace %s owned by %s (%s) and %s (%s)",
						l.ResourceVersion, ns, a.holder, a.lease, b.holder, b.lease))
				}
			}
		}
	}
}

// watchOwnership starts o's watch of the Leases of leaseNS; the returned
// function stops it once the watch has delivered every write up to now.
func watchOwnership(ctx context.Context, t *testing.T, leaseNS string, o *ownership) func() {
	t.Helper()
	o.held, o.seen = map[string]string{}, map[int]bool{}
	leases := env.Client().CoordinationV1().Leases(leaseNS)
	list, err := leases.List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for i := range list.Items {
		o.observe(&list.Items[i], false)
	}
	w, err := leases.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: false})
	require.NoError(t, err)
	done := make(chan struct{})
	var stopping atomic.Bool // w.Stop may end the stream with an error event
	// Names of the Leases the watch delivered: the barrier below waits for
	// its marker's name. (Comparing the last delivered resourceVersion with
	// the marker's failed when a renewal came through right after it.)
	delivered := map[string]bool{}
	var deliveredMu sync.Mutex
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordv1.Lease)
			if !ok {
				// An error event after the stop, or once ctx ended (the
				// stream is cut then), is the end of the watch, not a failure.
				if !stopping.Load() && ctx.Err() == nil {
					t.Errorf("Lease watch: %v", ev.Object)
				}
				return
			}
			o.observe(l, ev.Type == watch.Deleted)
			deliveredMu.Lock()
			delivered[l.Name] = true
			deliveredMu.Unlock()
		}
	}()
	// The goroutine never outlives the test (it reported into a finished
	// test once: "Fail in goroutine after … has completed").
	t.Cleanup(func() {
		stopping.Store(true)
		w.Stop()
		<-done
	})
	return func() {
		// The barrier: a write made now (a marker Lease) has come through
		// the watch, so every write before it has.
		marker, err := leases.Create(ctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{GenerateName: "marker-", Namespace: leaseNS}}, metav1.CreateOptions{})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			deliveredMu.Lock()
			defer deliveredMu.Unlock()
			return delivered[marker.Name]
		}, 30*time.Second, 50*time.Millisecond, "the watch delivers the marker")
		stopping.Store(true)
		w.Stop()
		<-done
	}
}

// TestShardCountChange rolls the queue from one activator shard count to
// another as a Deployment rollout does: replicas of the new count start
// while those of the old one run. The new ones join the members Lease and
// run no shard (runplane_activator_shard_waiting) while a replica of the
// old count is live; the old ones keep dispatching (2 → 3: one of them
// takes over the other's shard when it stops); once the last old one has
// stopped, the new ones take their shards. At no write of any Lease did
// one namespace have two owners (a watch of every Lease checks each
// instant; the unsharded activator runs on the manager's Lease holder
// while 1 is the members Lease's active count). On the release before, the
// replicas of 3 took the free Lease runplane-queue-activator-2 at once,
// beside the replicas of 2 holding -0 and -1, and the replicas of 2 took
// their shards beside the unsharded activator.
func TestShardCountChange(t *testing.T) {
	for _, tc := range []struct{ from, to, replicas int }{{2, 3, 3}, {1, 2, 2}} {
		t.Run(fmt.Sprintf("%d to %d", tc.from, tc.to), func(t *testing.T) { shardCountChange(t, tc.from, tc.to, tc.replicas) })
	}
}

func shardCountChange(t *testing.T, from, to, replicas int) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	leaseNS := fmt.Sprintf("shard-count-%d-%d", from, to)
	require.NoError(t, env.CreateNamespace(ctx, leaseNS))
	nats := natsauth.JetStream(t, nil)
	scrapers, err := scrape.New(ctx, env)
	require.NoError(t, err)

	// Namespaces in every pair (shard of from, shard of to): whichever
	// two owners of the two counts there are at once, one namespace is
	// in both.
	pair := func(a, b int) string {
		for k := 0; ; k++ {
			ns := fmt.Sprintf("count-%d%d-%d%d-%d", from, to, a, b, k)
			if shard.Of(ns, from) == a && shard.Of(ns, to) == b {
				return ns
			}
		}
	}
	var nss, pools []string
	for a := range from {
		for b := range to {
			nss = append(nss, pair(a, b))
		}
	}
	// Pools where the work is: in every shard of both counts.
	for i := range max(from, to) {
		pools = append(pools, pair(i%from, i%to))
	}
	for _, ns := range pools {
		shardPool(ctx, t, nats.ClientURL(), ns)
	}
	o := &ownership{nss: nss, countOf: func(id string) int {
		n, _ := strconv.Atoi(id[1:2]) // "s<count>-..."
		return n
	}}
	stopWatch := watchOwnership(ctx, t, leaseNS, o)

	round := 0
	invokeAll := func(rs ...replica) {
		round++
		for _, ns := range pools {
			for _, r := range rs {
				invokeOnce(t, r.q, ns, fmt.Sprintf("round%d-%s", round, r.id))
			}
		}
	}
	// settled: the count's Leases held by live, and the activators run.
	settled := func(count int, live ...replica) func() bool {
		if count > 1 {
			return settledShards(ctx, t, leaseNS, count, count/len(live), scrapers.Reader, live...)
		}
		return func() bool {
			l, err := env.Client().CoordinationV1().Leases(leaseNS).Get(ctx, shard.DefaultLeaseName, metav1.GetOptions{})
			if err != nil {
				return false
			}
			for _, r := range live {
				if ptr.Deref(l.Spec.HolderIdentity, "") == r.id {
					return gauge(r.q.MetricsURL, scrapers.Reader, "runplane_activator_rebuilt") == 1
				}
			}
			return false
		}
	}
	newReplica := func(count int, name string) replica {
		return shardReplica(t, nats.ClientURL(), leaseNS, fmt.Sprintf("s%d-%s", count, name), count)
	}

	old := []replica{newReplica(from, "a"), newReplica(from, "b")}
	require.Eventually(t, settled(from, old...), 90*time.Second, 200*time.Millisecond, "the count of %d runs", from)
	invokeAll(old...)

	// The rollout: replicas of the new count start beside them, and wait.
	var cur []replica
	for _, name := range []string{"a", "b", "c"}[:replicas] {
		cur = append(cur, newReplica(to, name))
	}
	waiting := func(rs ...replica) func() bool {
		return func() bool {
			for _, r := range rs {
				if gauge(r.q.MetricsURL, scrapers.Reader, "runplane_activator_shard_waiting") != 1 {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, waiting(cur...), 60*time.Second, 100*time.Millisecond, "the replicas of %d wait", to)
	invokeAll(append(old, cur...)...)

	// One old replica leaves. Sharded, the other runs every shard of the
	// old count. Unsharded, whoever takes the manager's Lease may be a new
	// replica: the last old one is then a standby, which writes no members
	// entry, and the new count may take over now.
	require.NoError(t, old[0].q.Stop())
	if from > 1 {
		require.Eventually(t, settledShards(ctx, t, leaseNS, from, from, scrapers.Reader, old[1]), 60*time.Second, 200*time.Millisecond,
			"every shard of %d on %s: %v", from, old[1].id, holders(ctx, t, leaseNS, from))
		require.True(t, waiting(cur...)(), "the replicas of %d still wait", to)
	}
	invokeAll(append(old[1:], cur...)...)

	// The last old one leaves: the new count is the active one.
	require.NoError(t, old[1].q.Stop())
	require.Eventually(t, settled(to, cur...), 60*time.Second, 200*time.Millisecond, "the count of %d runs", to)
	for _, r := range cur {
		assert.Equal(t, 0, gauge(r.q.MetricsURL, scrapers.Reader, "runplane_activator_shard_waiting"), "%s runs", r.id)
	}
	invokeAll(cur...)

	stopWatch()
	o.mu.Lock()
	defer o.mu.Unlock()
	assert.Equal(t, map[int]bool{from: true, to: true}, o.seen, "the watch saw both counts own namespaces")
	assert.Empty(t, o.overlaps, "no namespace had two owners at any instant")
}
