package tenancy

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/natsaccounts"
	"github.com/runplane/runplane/internal/natscallout"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/natsauth"
)

func podSpec() corev1.PodSpec {
	return corev1.PodSpec{ServiceAccountName: "worker", Containers: []corev1.Container{{Name: "main", Image: "pause"}}}
}

// poolPod creates a Deployment of pool in ns and returns its one Pod.
func poolPod(t *testing.T, ns, pool string) *corev1.Pod {
	t.Helper()
	return poolPods(t, ns, pool, 1)[0]
}

// poolPods creates a Deployment of pool in ns with n replicas and returns
// its Pods.
func poolPods(t *testing.T, ns, pool string, n int32) []*corev1.Pod {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{api.LabelPool: pool}
	_, err := env.Client().AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: pool, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec()},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	var pods []*corev1.Pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list, err := env.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelPool + "=" + pool})
		require.NoError(c, err)
		require.Len(c, list.Items, int(n))
		pods = nil
		for i := range list.Items {
			pods = append(pods, &list.Items[i])
		}
	}, 60*time.Second, 100*time.Millisecond, "the Deployment's Pods")
	return pods
}

func bound(p *corev1.Pod) *authnv1.BoundObjectReference {
	return &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}
}

// TestWorkerIdentityFromBoundToken: only a token with the NATS audience,
// bound to a live Pod that its pool's Deployment owns, becomes a worker.
func TestWorkerIdentityFromBoundToken(t *testing.T) {
	ctx := context.Background()
	tenant(t, "workers-a", "worker")
	worker := poolPod(t, "workers-a", "echo")
	bare, err := env.Client().CoreV1().Pods("workers-a").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "impostor", Labels: map[string]string{api.LabelPool: "echo"}},
		Spec:       podSpec(),
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	nats := []string{natscallout.Audience}
	auth := &natscallout.KubeAuthenticator{Client: env.Client(), Audience: natscallout.Audience}

	cases := []struct {
		name    string
		token   string
		wantErr string
	}{
		{name: "bound to a pool Pod", token: token(t, "workers-a", "worker", nats, bound(worker))},
		{name: "apiserver audience", token: token(t, "workers-a", "worker", nil, bound(worker)), wantErr: "audience"},
		{name: "minted without a Pod binding", token: token(t, "workers-a", "worker", nats, nil), wantErr: "not bound to a Pod"},
		{name: "bare Pod labelled with the pool", token: token(t, "workers-a", "worker", nats, bound(bare)), wantErr: "not owned by a ReplicaSet"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, err := auth.Authenticate(ctx, tc.token)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, natscallout.Identity{Name: "workers-a/" + worker.Name, Namespace: "workers-a", Pool: "echo",
				Worker: worker.Name, Expires: id.Expires, Concurrency: 1}, id)
			assert.WithinDuration(t, time.Now().Add(10*time.Minute), id.Expires, time.Minute)
		})
	}

	t.Run("Pod deleted", func(t *testing.T) {
		tok := token(t, "workers-a", "worker", nats, bound(bare))
		require.NoError(t, env.Client().CoreV1().Pods("workers-a").Delete(ctx, bare.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err := auth.Authenticate(ctx, tok)
			require.ErrorContains(c, err, "not authenticated")
		}, 30*time.Second, 100*time.Millisecond)
	})
}

// TestWorkerConnectsThroughCallout: the whole chain on a real nats-server:
// the worker's bound token is its NATS credential, and the server enforces
// the subjects the callout granted.
func TestWorkerConnectsThroughCallout(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tenant(t, "workers-b", "worker")
	worker := poolPod(t, "workers-b", "echo")

	sc := stream.Config{}.WithDefaults()
	dir := t.TempDir()
	auth, err := natsauth.Write(filepath.Join(dir, "auth"))
	require.NoError(t, err)
	srv, err := natsauth.Start(filepath.Join(dir, "nats"), "127.0.0.1", auth, queue.WorkerExports(sc))
	require.NoError(t, err)
	defer srv.Shutdown()
	asQueue, err := auth.QueueOption()
	require.NoError(t, err)
	internal, err := nats.Connect(srv.ClientURL(), asQueue)
	require.NoError(t, err)
	defer internal.Close()
	sysJWT, sysSeed, err := auth.Trust.SystemCreds()
	require.NoError(t, err)
	sys, err := nats.Connect(srv.ClientURL(), auth.TLSOption(), nats.UserJWTAndSeed(sysJWT, string(sysSeed)))
	require.NoError(t, err)
	defer sys.Close()
	ijs, err := jetstream.New(internal)
	require.NoError(t, err)
	revocations, err := natscallout.OpenRevocations(ctx, ijs, 1)
	require.NoError(t, err)
	responder := &natscallout.Responder{
		Trust: auth.Trust, Clock: clock.RealClock{}, MaxTTL: time.Hour,
		Auth:     &natscallout.KubeAuthenticator{Client: env.Client(), Audience: natscallout.Audience},
		Layout:   queue.WorkerLayout(sc),
		Accounts: natscallout.NewWorkerAccounts(auth.Trust, &natsaccounts.Resolver{Conn: sys, Trust: auth.Trust}, revocations, nil),
	}
	go func() {
		_ = natscallout.Serve(ctx, internal, responder, natscallout.NewMetrics(nil), slog.New(slog.NewTextHandler(io.Discard, nil)), natscallout.ServeOptions{})
	}()
	require.Eventually(t, func() bool {
		subs, err := srv.Subsz(&server.SubszOptions{Subscriptions: true, Test: "$SYS.REQ.USER.AUTH", Account: auth.Trust.Runplane.Pub})
		return err == nil && subs.Total > 0
	}, 5*time.Second, 10*time.Millisecond)

	violations := make(chan error, 1)
	conn, err := nats.Connect(srv.ClientURL(), auth.TLSOption(), nats.Token(token(t, "workers-b", "worker", []string{natscallout.Audience}, bound(worker))),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	require.NoError(t, err)
	defer conn.Close()
	subj := messages.Subjects{Prefix: sc.Prefix}
	_, err = conn.SubscribeSync(subj.Cancel("workers-b", "echo", worker.Name))
	require.NoError(t, err)
	_, err = conn.SubscribeSync(subj.Cancel("workers-a", "*", "*"))
	require.NoError(t, err)
	require.NoError(t, conn.Flush())
	require.ErrorContains(t, <-violations, `Permissions Violation for Subscription to "`+subj.Cancel("workers-a", "*", "*")+`"`)

	_, err = nats.Connect(srv.ClientURL(), auth.TLSOption(), nats.Token(token(t, "workers-b", "worker", nil, nil)), nats.NoReconnect())
	require.ErrorContains(t, err, "Authorization Violation")
}
