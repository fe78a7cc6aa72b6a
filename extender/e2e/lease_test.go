package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender"
)

// An in-process extender (extender.Start, as make dev runs it) following
// the co-located scheduler's Lease binds exactly while this host holds it.
func TestFollowSchedulerLease(t *testing.T) {
	h := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	e, err := extender.Start(ctx, extender.Config{
		RESTConfig: env.RESTConfig(), Namespace: api.DefaultNamespace, Addr: "127.0.0.1:0",
		FollowLease: api.DefaultNamespace + "/test-scheduler", RetryPeriod: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.CACert()) == 0 || e.IsLeader() {
		t.Fatalf("fresh extender: CA %d bytes, leader %v; want a CA and not leading", len(e.CACert()), e.IsLeader())
	}
	host, _ := os.Hostname()
	holder, dur := host+"_1234", int32(10)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "test-scheduler", Namespace: api.DefaultNamespace},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
	leases := h.client.CoordinationV1().Leases(api.DefaultNamespace)
	if lease, err = leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "binding while this host's scheduler leads", func() (bool, error) { return e.IsLeader(), nil })
	other := "elsewhere_1"
	lease.Spec.HolderIdentity = &other
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "not binding once another host's scheduler leads", func() (bool, error) { return !e.IsLeader(), nil })
	cancel()
	if err := e.Wait(); err != nil {
		t.Fatal(err)
	}
}
