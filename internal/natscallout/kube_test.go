package natscallout

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/runplane/runplane/api"
)

// fakeToken is a JWT-shaped token with the claims of a Pod-bound NATS
// token, unsigned: the fake TokenReview below decides what it
// authenticates as.
func fakeToken(exp time.Time) string {
	return fakeClaims(fmt.Sprintf(`{"exp":%d,"aud":[%q],"kubernetes.io":{"pod":{"name":"echo-5d4-x1","uid":"pod-uid"}}}`, exp.Unix(), Audience))
}

func fakeClaims(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(claims)) + ".sig"
}

func controllerRef(kind, name string, uid types.UID) []metav1.OwnerReference {
	yes := true
	return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: &yes}}
}

// poolObjects is a pool "echo" in team-a: Deployment → ReplicaSet → Pod.
func poolObjects() (*appsv1.Deployment, *appsv1.ReplicaSet, *corev1.Pod) {
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "echo", UID: "dep-uid",
		Labels: map[string]string{api.LabelPool: "echo"}}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "echo-5d4", UID: "rs-uid",
		OwnerReferences: controllerRef("Deployment", "echo", "dep-uid")}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "echo-5d4-x1", UID: "pod-uid",
			Labels:          map[string]string{api.LabelPool: "echo"},
			OwnerReferences: controllerRef("ReplicaSet", "echo-5d4", "rs-uid")},
		Spec: corev1.PodSpec{ServiceAccountName: "worker"},
	}
	return dep, rs, pod
}

func TestKubeAuthenticator(t *testing.T) {
	exp := time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC)
	bound := authnv1.TokenReviewStatus{
		Authenticated: true,
		Audiences:     []string{Audience},
		User: authnv1.UserInfo{Username: "system:serviceaccount:team-a:worker", Extra: map[string]authnv1.ExtraValue{
			extraPodName: {"echo-5d4-x1"}, extraPodUID: {"pod-uid"},
		}},
	}
	cases := []struct {
		name    string
		status  func(*authnv1.TokenReviewStatus)
		objects func(*appsv1.Deployment, *appsv1.ReplicaSet, *corev1.Pod)
		token   string
		wantErr string
		reason  string // Reason of the error (default ReasonNotWorker)
		// wantConcurrency is the admitted Identity's (default 1).
		wantConcurrency int
	}{
		{name: "worker of its pool"},
		{name: "worker running 8 invocations at once", objects: func(_ *appsv1.Deployment, _ *appsv1.ReplicaSet, p *corev1.Pod) {
			p.Annotations = map[string]string{api.AnnotationConcurrency: "8"}
		}, wantConcurrency: 8},
		{name: "apiserver refuses the token", status: func(s *authnv1.TokenReviewStatus) {
			s.Authenticated, s.Error = false, "invalid bearer token"
		}, wantErr: "invalid bearer token", reason: ReasonInvalidToken},
		{name: "token for another audience", status: func(s *authnv1.TokenReviewStatus) { s.Audiences = []string{"https://kubernetes.default.svc"} },
			wantErr: `not for audience "nats.runplane.io"`, reason: ReasonInvalidToken},
		{name: "a user, not a ServiceAccount", status: func(s *authnv1.TokenReviewStatus) { s.User.Username = "alice" },
			wantErr: "is not a ServiceAccount", reason: ReasonInvalidToken},
		{name: "token minted without a Pod binding", status: func(s *authnv1.TokenReviewStatus) { s.User.Extra = nil },
			wantErr: "not bound to a Pod", reason: ReasonInvalidToken},
		{name: "bound Pod deleted", objects: func(_ *appsv1.Deployment, _ *appsv1.ReplicaSet, p *corev1.Pod) { p.Name = "other" },
			wantErr: "not found"},
		{name: "bound Pod re-created under the same name", objects: func(_ *appsv1.Deployment, _ *appsv1.ReplicaSet, p *corev1.Pod) { p.UID = "new-uid" },
			wantErr: "was replaced"},
		{name: "Pod runs as another ServiceAccount", objects: func(_ *appsv1.Deployment, _ *appsv1.ReplicaSet, p *corev1.Pod) { p.Spec.ServiceAccountName = "default" },
			wantErr: `runs as "default"`},
		{name: "Pod ended (an evicted one stays listed)", objects: func(_ *appsv1.Deployment, _ *appsv1.ReplicaSet, p *corev1.Pod) { p.Status.Phase = corev1.PodFailed },
			wantErr: "has ended (Failed)", reason: ReasonNotWorker},
		{name: "Pod without the pool label", objects: func(_ *appsv1.Deployment, _ *appsv1.ReplicaSet, p *corev1.Pod) { delete(p.Labels, api.LabelPool) },
			wantErr: "not a pool worker"},
		{name: "bare Pod labelled with a pool", objects: func(_ *appsv1.Deployment, _ *appsv1.ReplicaSet, p *corev1.Pod) { p.OwnerReferences = nil },
			wantErr: "not owned by a ReplicaSet"},
		{name: "ReplicaSet without a Deployment", objects: func(_ *appsv1.Deployment, rs *appsv1.ReplicaSet, _ *corev1.Pod) { rs.OwnerReferences = nil },
			wantErr: "not owned by a Deployment"},
		{name: "Pod claims a pool its Deployment is not", objects: func(d *appsv1.Deployment, _ *appsv1.ReplicaSet, _ *corev1.Pod) { d.Labels[api.LabelPool] = "other" },
			wantErr: `not the workload of pool "echo"`},
		{name: "token without expiry", token: "a.e30.c", wantErr: "no expiry", reason: ReasonMalformed},
		{name: "not a JWT", token: "garbage", wantErr: "not a JWT", reason: ReasonMalformed},
		{name: "expired claims", token: fakeToken(exp.Add(-2 * time.Hour)), wantErr: "expired", reason: ReasonMalformed},
		{name: "claims for another audience", token: fakeClaims(fmt.Sprintf(`{"exp":%d,"aud":"https://kubernetes.default.svc","kubernetes.io":{"pod":{"name":"p","uid":"u"}}}`, exp.Unix())),
			wantErr: "not for audience", reason: ReasonMalformed},
		{name: "claims without a Pod", token: fakeClaims(fmt.Sprintf(`{"exp":%d,"aud":[%q]}`, exp.Unix(), Audience)),
			wantErr: "not bound to a Pod", reason: ReasonMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dep, rs, pod := poolObjects()
			if tc.objects != nil {
				tc.objects(dep, rs, pod)
			}
			client := fake.NewClientset(dep, rs, pod)
			status := *bound.DeepCopy()
			if tc.status != nil {
				tc.status(&status)
			}
			var reviewed authnv1.TokenReviewSpec
			client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
				tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
				reviewed = tr.Spec
				return true, &authnv1.TokenReview{Spec: tr.Spec, Status: status}, nil
			})
			token := tc.token
			if token == "" {
				token = fakeToken(exp)
			}

			clk := clocktesting.NewFakePassiveClock(exp.Add(-time.Hour))
			id, err := (&KubeAuthenticator{Client: client, Audience: Audience, Clock: clk}).Authenticate(context.Background(), token)

			if tc.reason == ReasonMalformed {
				assert.Empty(t, reviewed.Audiences, "refused without a review")
			} else {
				assert.Equal(t, []string{Audience}, reviewed.Audiences, "the review asks for the NATS audience")
			}
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				assert.Equal(t, cmp.Or(tc.reason, ReasonNotWorker), Reason(err))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, Identity{Name: "team-a/echo-5d4-x1", Namespace: "team-a", Pool: "echo", Worker: "echo-5d4-x1", Expires: time.Unix(exp.Unix(), 0),
				Concurrency: cmp.Or(tc.wantConcurrency, 1)}, id)
		})
	}
}

// TestKubeAuthenticatorOutage: an apiserver that cannot answer is not the
// client's fault: its reason is apiserver_unavailable (never cached).
func TestKubeAuthenticatorOutage(t *testing.T) {
	exp := time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC)
	dep, rs, pod := poolObjects()
	client := fake.NewClientset(dep, rs, pod)
	client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd is down")
	})
	auth := &KubeAuthenticator{Client: client, Audience: Audience, Clock: clocktesting.NewFakePassiveClock(exp.Add(-time.Hour))}
	_, err := auth.Authenticate(context.Background(), fakeToken(exp))
	require.ErrorContains(t, err, "etcd is down")
	assert.Equal(t, ReasonUnavailable, Reason(err))
}
