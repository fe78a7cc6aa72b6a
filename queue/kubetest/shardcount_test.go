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

	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/shard"
	"github.com/runplane/runplane/test/natsauth"
	"github.com/runplane/runplane/test/scrape"
)

// shardLease matches a shard Lease's name: its index (and, since the
// count is in the names, the count).
var shardLease = regexp.MustCompile("^" + regexp.QuoteMeta(queue.DefaultLeaseName) + `-(\d+)(?:of\d+)?$`)

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
	type owner struct {
		holder, lease string
		count         int
	}
	for _, ns := range o.nss {
		var owners []owner
		for name, holder := range o.held {
			m := shardLease.FindStringSubmatch(name)
			if holder == "" || m == nil {
				continue
			}
			n := o.countOf(holder)
			o.seen[n] = true
			if i, _ := strconv.Atoi(m[1]); shard.Of(ns, n) == i {
				owners = append(owners, owner{holder, name, n})
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
	var lastRV string
	var rvMu sync.Mutex
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordv1.Lease)
			if !ok {
				if !stopping.Load() {
					t.Errorf("Lease watch: %v", ev.Object)
				}
				return
			}
			o.observe(l, ev.Type == watch.Deleted)
			rvMu.Lock()
			lastRV = l.ResourceVersion
			rvMu.Unlock()
		}
	}()
	return func() {
		// The barrier: a write made now (a marker Lease) has come through
		// the watch, so every write before it has.
		marker, err := leases.Create(ctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{GenerateName: "marker-", Namespace: leaseNS}}, metav1.CreateOptions{})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			rvMu.Lock()
			defer rvMu.Unlock()
			return lastRV == marker.ResourceVersion
		}, 30*time.Second, 50*time.Millisecond, "the watch delivers the marker")
		stopping.Store(true)
		w.Stop()
		<-done
	}
}

// TestShardCountChange rolls the queue from 2 activator shards to 3 as a
// Deployment rollout does: replicas of the new count start while those of
// the old one run. The new ones join the members Lease and take no shard
// (runplane_activator_shard_waiting) while a replica of the old count is
// live; the old ones keep dispatching (one of them takes over the other's
// shard when it stops); once the last old one has stopped, the new ones
// take their shards. At no write of any Lease did one namespace have two
// owners (a watch of every Lease checks each instant). On the release
// before, the replicas of 3 took the free Lease runplane-queue-activator-2
// at once, beside the replicas of 2 holding -0 and -1.
func TestShardCountChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	leaseNS := "shard-count-leases"
	require.NoError(t, env.CreateNamespace(ctx, leaseNS))
	nats := natsauth.JetStream(t, nil)
	scrapers, err := scrape.New(ctx, env)
	require.NoError(t, err)

	// Namespaces in every pair (shard of 2, shard of 3): whichever two
	// Leases of the two counts are held at once, one namespace is in both.
	var nss []string
	for a := range 2 {
		for b := range 3 {
			for k := 0; ; k++ {
				ns := fmt.Sprintf("count-%d%d-%d", a, b, k)
				if shard.Of(ns, 2) == a && shard.Of(ns, 3) == b {
					nss = append(nss, ns)
					break
				}
			}
		}
	}
	// Pools where the work is: every shard of 3 (and so both of 2) has one.
	pools := []string{nss[0], nss[4], nss[2]} // (0,0) (1,1) (0,2)
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

	old := []replica{shardReplica(t, nats.ClientURL(), leaseNS, "s2-a", 2), shardReplica(t, nats.ClientURL(), leaseNS, "s2-b", 2)}
	require.Eventually(t, settledShards(ctx, t, leaseNS, 2, 1, scrapers.Reader, old...), 90*time.Second, 200*time.Millisecond,
		"a shard of 2 each: %v", holders(ctx, t, leaseNS, 2))
	invokeAll(old...)

	// The rollout: replicas of 3 start beside them, and wait.
	var cur []replica
	for _, id := range []string{"s3-a", "s3-b", "s3-c"} {
		cur = append(cur, shardReplica(t, nats.ClientURL(), leaseNS, id, 3))
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
	require.Eventually(t, waiting(cur...), 60*time.Second, 100*time.Millisecond, "the replicas of 3 wait")
	invokeAll(append(old, cur...)...)

	// One old replica leaves: the other runs both shards of 2.
	require.NoError(t, old[0].q.Stop())
	require.Eventually(t, settledShards(ctx, t, leaseNS, 2, 2, scrapers.Reader, old[1]), 60*time.Second, 200*time.Millisecond,
		"both shards of 2 on %s: %v", old[1].id, holders(ctx, t, leaseNS, 2))
	require.True(t, waiting(cur...)(), "the replicas of 3 still wait")
	invokeAll(append(old[1:], cur...)...)

	// The last old one leaves: the count of 3 becomes active.
	require.NoError(t, old[1].q.Stop())
	require.Eventually(t, settledShards(ctx, t, leaseNS, 3, 1, scrapers.Reader, cur...), 60*time.Second, 200*time.Millisecond,
		"a shard of 3 each: %v", holders(ctx, t, leaseNS, 3))
	for _, r := range cur {
		assert.Equal(t, 0, gauge(r.q.MetricsURL, scrapers.Reader, "runplane_activator_shard_waiting"), "%s runs", r.id)
	}
	invokeAll(cur...)

	stopWatch()
	o.mu.Lock()
	defer o.mu.Unlock()
	assert.Equal(t, map[int]bool{2: true, 3: true}, o.seen, "the watch saw both counts hold Leases")
	assert.Empty(t, o.overlaps, "no namespace had two owners at any instant")
}
