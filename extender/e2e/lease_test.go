package e2e

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/rest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender"
)

// An in-process extender (extender.Start, as make dev runs it) following
// the co-located scheduler's Lease binds exactly while this host holds it.
func TestFollowSchedulerLease(t *testing.T) {
	h := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cfg := extender.Config{RESTConfig: env.RESTConfig()}
	cfg.Addr, cfg.ManagedResources = "127.0.0.1:0", managed
	cfg.LeaderElection.FollowLease = api.DefaultNamespace + "/test-scheduler"
	e, err := extender.Start(ctx, cfg)
	require.NoError(t, err)
	require.NotEmpty(t, e.CACert())
	require.False(t, e.IsLeader(), "binding before the scheduler's Lease exists")
	host, _ := os.Hostname()
	holder, dur := host+"_1234", int32(10)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "test-scheduler", Namespace: api.DefaultNamespace},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
	leases := h.client.CoordinationV1().Leases(api.DefaultNamespace)
	lease, err = leases.Create(ctx, lease, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, e.IsLeader, 10*time.Second, poll, "binding while this host's scheduler leads")
	// One registry, controller-runtime's, holds the extender's series
	// beside the manager's (client-go's): /metrics serves it.
	for _, name := range []string{"runplane_extender_leader", "rest_client_requests_total"} {
		n, err := testutil.GatherAndCount(ctrlmetrics.Registry, name)
		require.NoError(t, err)
		require.Positive(t, n, "%s in controller-runtime's registry", name)
	}
	other := "elsewhere_1"
	lease.Spec.HolderIdentity = &other
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !e.IsLeader() }, 10*time.Second, poll, "not binding once another host's scheduler leads")
	cancel()
	require.NoError(t, e.Wait())
}

// TestLeadsOnlyOnceSynced: an extender that may win a free Lease (as when
// its predecessor released it at a rolling update) binds only once its
// ledger holds every Pod — reservations included. Before, it led from the
// moment it won the Lease, the Pod list still on its way: it reserved and
// bound into capacity whose Pods it had not seen, and released as stale
// every reservation whose preemptor it had not seen yet. Now the Pods are
// the manager's cache's, and the manager runs for the Lease only once its
// cache synced; that the extender then also waits for its ledger's event
// handlers, which trail the stores, is
// extender.TestLeadsOnlyOnceTheLedgerHasEveryObject's.
func TestLeadsOnlyOnceSynced(t *testing.T) {
	setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	release, asked := make(chan struct{}), make(chan struct{})
	rc := rest.CopyConfig(env.RESTConfig())
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &holdPods{next: rt, release: release, asked: asked}
	})
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	started := make(chan *extender.Extender, 1)
	leaseName := "sync-test-" + utilrand.String(5)
	go func() {
		cfg := extender.Config{RESTConfig: rc, Logger: logger}
		cfg.Addr, cfg.ManagedResources, cfg.LeaderElection.ResourceName = "127.0.0.1:0", managed, leaseName
		e, err := extender.Start(ctx, cfg)
		assert.NoError(t, err)
		started <- e
	}()
	select {
	case <-asked:
	case <-time.After(time.Minute):
		cancel()
		<-started // no assertion of its goroutine after the test ended
		t.Fatal("the extender never asked for the Pods")
	}
	// The Pod list is held: the extender may run for the Lease, but must
	// not bind. Give it the time to say it binds (what is asserted is the
	// order of the records, not an absence).
	time.Sleep(500 * time.Millisecond)
	logger.Info("test: Pod list released")
	close(release)
	e := <-started
	require.NotNil(t, e)
	require.Eventually(t, e.IsLeader, time.Minute, poll, "binding once synced")
	released, binding := logs.index("test: Pod list released"), logs.index(`"binding":true`)
	require.GreaterOrEqual(t, binding, 0)
	require.Greater(t, binding, released, "bound before its ledger had the Pods:\n%s", logs.String())
	cancel()
	require.NoError(t, e.Wait())
}

// holdPods holds every request for Pods until release is closed; asked is
// closed at the first.
type holdPods struct {
	next    http.RoundTripper
	release <-chan struct{}
	asked   chan struct{}
	once    sync.Once
}

func (h *holdPods) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == "/api/v1/pods" {
		h.once.Do(func() { close(h.asked) })
		select {
		case <-h.release:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return h.next.RoundTrip(r)
}

// syncBuffer is a log sink read while the extender writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) index(part string) int { return strings.Index(s.String(), part) }
