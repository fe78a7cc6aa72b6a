package pki

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// TestKeeperRunsOnEveryReplica: a manager runs a Runnable that is not a
// LeaderElectionRunnable on the leader only, so a standby would never
// load or renew the certificate it serves.
func TestKeeperRunsOnEveryReplica(t *testing.T) {
	var r manager.Runnable = &Keeper{}
	le, ok := r.(manager.LeaderElectionRunnable)
	require.True(t, ok, "a plain Runnable runs on the leader only")
	require.False(t, le.NeedLeaderElection())
}

func TestKeeperNotAfter(t *testing.T) {
	k := &Keeper{Client: fake.NewSimpleClientset(), Secret: SecretRef{Namespace: "ns", Name: "metrics"}, Options: Options{Name: "m", DNSNames: []string{"m.ns.svc"}}}
	require.True(t, k.NotAfter().IsZero(), "no certificate before Init")
	require.NoError(t, k.Init(context.Background()))
	require.False(t, k.NotAfter().IsZero())
	require.Equal(t, k.bundle.Load().NotAfter, k.NotAfter())
}
