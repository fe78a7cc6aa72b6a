// Package tenancy tests runplane's tenant boundaries against the real
// kube-apiserver of test/cluster: callers authorized by RBAC on
// serverless.runplane.io, and workers whose NATS identity comes from a
// projected token bound to their Pod.
package tenancy

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/test/cluster"
)

var env *cluster.Cluster

func TestMain(m *testing.M) {
	cluster.Main(m, cluster.Options{Nodes: []cluster.Node{{Name: "node-0"}}}, func(c *cluster.Cluster) { env = c })
}

// tenant creates a namespace with a ServiceAccount in it.
func tenant(t *testing.T, ns, sa string) {
	t.Helper()
	ctx := context.Background()
	if err := env.CreateNamespace(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	_, err := env.Client().CoreV1().ServiceAccounts(ns).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

// token mints a ServiceAccount token, bound to bind when it is set.
func token(t *testing.T, ns, sa string, audiences []string, bind *authnv1.BoundObjectReference) string {
	t.Helper()
	tr, err := env.Client().CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To[int64](600), BoundObjectRef: bind},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return tr.Status.Token
}
