package kubetest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runplane/runplane/queue/activator"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/queuetest"
	"github.com/runplane/runplane/queue/shard"
	"github.com/runplane/runplane/sidecar/sidecartest"
	"github.com/runplane/runplane/test/natsauth"
	"github.com/runplane/runplane/test/scrape"
)

// shardNamespaces picks one namespace name (prefix-<k>) in each of the
// first want shards of n.
func shardNamespaces(prefix string, n, want int) []string {
	out := make([]string, want)
	for k := 0; ; k++ {
		ns := fmt.Sprintf("%s-%d", prefix, k)
		if s := shard.Of(ns, n); s < want && out[s] == "" {
			out[s] = ns
		}
		if !slices.Contains(out, "") {
			return out
		}
	}
}

// holders reads the shard Leases: shard → holder ("" when free or absent).
func holders(ctx context.Context, t *testing.T, ns string, n int) []string {
	t.Helper()
	out := make([]string, n)
	for i := range n {
		l, err := env.Client().CoordinationV1().Leases(ns).Get(ctx, shard.LeaseName(shard.DefaultLeaseName, i, n), metav1.GetOptions{})
		if err == nil {
			out[i] = ptr.Deref(l.Spec.HolderIdentity, "")
		}
	}
	return out
}

// gauge reads the unlabelled series name of a replica's metrics (-1: not
// read). runplane_activator_rebuilt: the shard activators it runs that have
// rebuilt their state (and dispatch).
func gauge(url, token, name string) int {
	code, body, err := scrape.Get(url, token)
	if err != nil || code != http.StatusOK {
		return -1
	}
	for line := range strings.Lines(body) {
		var v float64
		if _, err := fmt.Sscanf(line, name+" %g", &v); err == nil {
			return int(v)
		}
	}
	return -1
}

// shardPool makes namespace ns with a pool "p" of one worker (the real
// sidecar, echoing) on nats.
func shardPool(ctx context.Context, t *testing.T, natsURL, ns string) {
	t.Helper()
	require.NoError(t, env.CreateNamespace(ctx, ns))
	labels := map[string]string{api.LabelPool: "p"}
	_, err := env.Client().AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: ns, Labels: labels,
			Annotations: map[string]string{api.AnnotationMinAvailable: "1", api.AnnotationMaxReplicas: "1"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "framework", Image: "framework"}}, TerminationGracePeriodSeconds: ptr.To(int64(0))}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	k := &sidecartest.Kubelet{Client: env.Client(), Namespace: ns, Selector: api.LabelPool + "=p",
		Config: func(*corev1.Pod) (sidecartest.Config, error) {
			return sidecartest.Config{NATSURL: natsURL, Namespace: ns, Pool: "p", Heartbeat: 200 * time.Millisecond, Handler: sidecartest.Echo}, nil
		},
		OnError: func(err error) { t.Log(err) }}
	kctx, kstop := context.WithCancel(context.Background())
	kdone := make(chan struct{})
	go func() { defer close(kdone); k.Run(kctx) }()
	t.Cleanup(func() { kstop(); <-kdone })
}

// replica is one queue replica of a sharded test.
type replica struct {
	id string
	q  *queuetest.Queue
}

// settledShards reports whether the n shard Leases are all held, each of
// live by exactly each, and each of live runs exactly each activators
// (its rebuilt gauge): the Leases and the replicas agree.
func settledShards(ctx context.Context, t *testing.T, leaseNS string, n, each int, reader string, live ...replica) func() bool {
	return func() bool {
		per := map[string]int{}
		for _, id := range holders(ctx, t, leaseNS, n) {
			per[id]++
		}
		for _, r := range live {
			if per[r.id] != each || gauge(r.q.MetricsURL, reader, "runplane_activator_rebuilt") != each {
				return false
			}
		}
		return per[""] == 0
	}
}

// invokeOnce sends one sync invocation id to namespace ns's pool through
// q's ingress and checks it ran once.
func invokeOnce(t *testing.T, q *queuetest.Queue, ns, id string) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"mode": "sync", "invocationID": id, "timeoutSeconds": 30, "payload": map[string]string{"ns": ns}})
	require.NoError(t, err)
	r, err := http.Post(q.Base+"/v1/namespaces/"+ns+"/pools/p/invocations", "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer r.Body.Close()
	var rec messages.Record
	require.NoError(t, json.NewDecoder(r.Body).Decode(&rec))
	assert.Equal(t, http.StatusOK, r.StatusCode, "%s in %s", id, ns)
	assert.Equal(t, messages.StateSucceeded, rec.State, "%s in %s", id, ns)
	assert.Empty(t, rec.Attempts, "%s in %s: one attempt (no retry policy)", id, ns)
}

// shardLeaseDuration is the sharded tests' shard Lease duration (renew
// deadline 70% of it, retry period 20%: shard.Config's defaults).
const shardLeaseDuration = 5 * time.Second

// shardReplica runs queue replica id with shards activator shards in
// leaseNS; opts change its Config.
func shardReplica(t *testing.T, natsURL, leaseNS, id string, shards int, opts ...func(*queue.Config)) replica {
	t.Helper()
	cfg := queue.Config{NATS: queue.NATS{URL: natsURL}, InsecureDisableCallerAuth: true, MetricsListen: "127.0.0.1:0",
		RESTConfig: env.RESTConfig(), LeaseNamespace: leaseNS, Identity: id,
		LeaderElection: shard.LeaderElection{LeaderElect: ptr.To(true), Shards: shards, ShardLeaseDuration: metav1.Duration{Duration: shardLeaseDuration}},
		Decisions:      activator.Decisions{Workers: activator.Workers{HeartbeatTimeout: metav1.Duration{Duration: 2 * time.Second}}, Backoff: 100 * time.Millisecond}, Tick: 100 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	return replica{id: id, q: queuetest.Run(t, cfg)}
}

// TestShardsHaveOneOwnerEach runs three queue replicas sharing the
// activator's 6 shards: once the Leases settle, every shard has exactly one
// holder, each replica holds 2 and runs exactly those 2 activators (its
// rebuilt gauge), and invocations of namespaces in different shards, sent
// to any replica's ingress, each run once. When one replica stops, its
// shards are drained and released to the other two (3 each), and work
// goes on.
func TestShardsHaveOneOwnerEach(t *testing.T) {
	const shards = 6
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	leaseNS := "shard-leases"
	require.NoError(t, env.CreateNamespace(ctx, leaseNS))
	nats := natsauth.JetStream(t, nil)
	nss := shardNamespaces("sharded", shards, 4)
	late := nss[3] // its pool appears once the shards run
	nss = nss[:3]
	for _, ns := range nss {
		shardPool(ctx, t, nats.ClientURL(), ns)
	}
	scrapers, err := scrape.New(ctx, env)
	require.NoError(t, err)
	rs := make([]replica, 3)
	for i := range rs {
		rs[i] = shardReplica(t, nats.ClientURL(), leaseNS, fmt.Sprintf("r%d", i), shards)
	}
	// The barrier: the Leases and the replicas' running activators agree.
	require.Eventually(t, settledShards(ctx, t, leaseNS, shards, 2, scrapers.Reader, rs...), 90*time.Second, 200*time.Millisecond,
		"2 shards held and run by each replica: %v", holders(ctx, t, leaseNS, shards))

	invokeAll := func(round string) {
		for i, ns := range nss {
			for _, r := range rs {
				invokeOnce(t, r.q, ns, fmt.Sprintf("%s-%d-%s", round, i, r.id))
			}
		}
	}
	invokeAll("before")

	// A namespace whose first pool appears while its shard runs: the
	// shard's consumers widen to it (the invoke consumer made again from the
	// stream's start), or its invocations would never be consumed.
	shardPool(ctx, t, nats.ClientURL(), late)
	nss = append(nss, late)
	require.Eventually(t, func() bool {
		r, err := http.Get(rs[0].q.Base + "/v1/namespaces/" + late + "/pools/p")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	}, 30*time.Second, 100*time.Millisecond, "pool of %s known", late)
	invokeAll("late")

	// r0 leaves: its shards are drained, released and taken by the others.
	require.NoError(t, rs[0].q.Stop())
	rs = rs[1:]
	require.Eventually(t, settledShards(ctx, t, leaseNS, shards, 3, scrapers.Reader, rs...), 60*time.Second, 200*time.Millisecond, "3 shards each for the two left: %v", holders(ctx, t, leaseNS, shards))
	invokeAll("after")
}
