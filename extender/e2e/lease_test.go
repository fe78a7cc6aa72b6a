package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
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
		FollowLease:      api.DefaultNamespace + "/test-scheduler",
		ManagedResources: []corev1.ResourceName{api.DefaultGPUResource, migResource}, // the shared catalog's
	})
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
	other := "elsewhere_1"
	lease.Spec.HolderIdentity = &other
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !e.IsLeader() }, 10*time.Second, poll, "not binding once another host's scheduler leads")
	cancel()
	require.NoError(t, e.Wait())
}
