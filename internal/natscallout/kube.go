package natscallout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/jwtclaims"
	"github.com/runplane/runplane/internal/refusal"
)

// Audience is the audience a worker's projected token must carry: a token
// minted for the apiserver (or anything else) is not a NATS credential.
const Audience = api.NATSTokenAudience

// The extra keys the apiserver sets on a token bound to a Pod.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// KubeAuthenticator admits a projected ServiceAccount token only when the
// apiserver vouches for it (TokenReview with the NATS audience), it is bound
// to a Pod that still exists with that UID, runs as that ServiceAccount, is
// labelled as a worker of a pool, and is owned (Deployment → ReplicaSet →
// Pod) by that pool's workload in the same namespace. A token a tenant
// mints for its ServiceAccount without a Pod binding is refused; one bound
// to its own pool Pod gives no more than that worker may do.
//
// Before any apiserver call, a token whose unverified claims cannot be a
// live Pod-bound token for Audience (not a JWT, no such audience, expired,
// no Pod) is refused: garbage costs no review.
type KubeAuthenticator struct {
	Client   kubernetes.Interface
	Audience string
	// Clock judges the unverified exp claim (nil: the real clock).
	Clock clock.PassiveClock
}

// Reasons a connection is refused: the reason label of
// runplane_nats_callout_answers_total (with cached and reviewed for
// admissions, and busy from Serve).
const (
	// ReasonMalformed: the token's unverified claims cannot be a live
	// Pod-bound token for the NATS audience; no apiserver call was made.
	ReasonMalformed = "malformed"
	// ReasonInvalidToken: the apiserver did not vouch for the token as a
	// Pod-bound ServiceAccount token for the NATS audience.
	ReasonInvalidToken = "invalid_token"
	// ReasonNotWorker: the token's Pod is gone, replaced, runs as another
	// ServiceAccount or is not its pool Deployment's.
	ReasonNotWorker = "not_worker"
	// ReasonUnavailable and ReasonTimeout: the apiserver could not be
	// asked in time; not the client's fault, never cached.
	ReasonUnavailable = "apiserver_unavailable"
	ReasonTimeout     = "timeout"
	// ReasonOther: any other refusal (no token presented, expired).
	ReasonOther = "other"
)

func refuse(reason string, format string, args ...any) error {
	return refusal.New(0, reason, format, args...)
}

// apiRefusal classifies an apiserver call's error: NotFound is the
// client's (the object does not exist), anything else the apiserver's.
func apiRefusal(err error, format string, args ...any) error {
	reason := ReasonUnavailable
	switch {
	case apierrors.IsNotFound(err):
		reason = ReasonNotWorker
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		reason = ReasonTimeout
	}
	return refusal.New(0, reason, format+": %w", append(args, err)...)
}

// Reason is the bounded reason of a refusal returned by Authenticate or
// Responder.Respond.
func Reason(err error) string {
	r, ok := errors.AsType[*refusal.Error](err)
	switch {
	case ok && r.Reason != "":
		return r.Reason
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return ReasonTimeout
	}
	return ReasonOther
}

// Authenticate implements Authenticator.
func (k *KubeAuthenticator) Authenticate(ctx context.Context, token string) (Identity, error) {
	exp, err := k.plausible(token)
	if err != nil {
		return Identity{}, &refusal.Error{Reason: ReasonMalformed, Err: err}
	}
	review, err := k.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{k.Audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, apiRefusal(err, "reviewing the token")
	}
	st := review.Status
	if !st.Authenticated {
		return Identity{}, refuse(ReasonInvalidToken, "token not authenticated: %s", st.Error)
	}
	if !slices.Contains(st.Audiences, k.Audience) {
		return Identity{}, refuse(ReasonInvalidToken, "token is not for audience %q", k.Audience)
	}
	ns, sa, ok := serviceAccount(st.User.Username)
	if !ok {
		return Identity{}, refuse(ReasonInvalidToken, "%q is not a ServiceAccount", st.User.Username)
	}
	podName, podUID := one(st.User.Extra[extraPodName]), one(st.User.Extra[extraPodUID])
	if podName == "" || podUID == "" {
		return Identity{}, refuse(ReasonInvalidToken, "token of %s/%s is not bound to a Pod", ns, sa)
	}
	id := Identity{Name: ns + "/" + podName, Namespace: ns, Worker: podName}
	pod, err := k.Client.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return id, apiRefusal(err, "bound Pod %s", id.Name)
	}
	if string(pod.UID) != podUID {
		return id, refuse(ReasonNotWorker, "bound Pod %s was replaced (UID %s, token for %s)", id.Name, pod.UID, podUID)
	}
	if pod.Spec.ServiceAccountName != sa {
		return id, refuse(ReasonNotWorker, "Pod %s runs as %q, token is of %q", id.Name, pod.Spec.ServiceAccountName, sa)
	}
	if p := pod.Status.Phase; p == corev1.PodSucceeded || p == corev1.PodFailed {
		// An ended Pod (an evicted one stays listed) runs no sidecar: its
		// token can only be a copy.
		return id, refuse(ReasonNotWorker, "Pod %s has ended (%s)", id.Name, p)
	}
	id.Pool = pod.Labels[api.LabelPool]
	if id.Pool == "" {
		return id, refuse(ReasonNotWorker, "Pod %s is not a pool worker (no %s label)", id.Name, api.LabelPool)
	}
	if err := k.ownedByPool(ctx, pod, id.Pool); err != nil {
		return id, err
	}
	id.Expires = exp
	id.Concurrency = concurrency(pod)
	return id, nil
}

// concurrency is the Pod's runplane.io/concurrency, which the webhook
// admitted (1..1024) and fixed at creation, and from which it set the
// sidecar's; 1, the default, when absent or not a number.
func concurrency(pod *corev1.Pod) int {
	n, err := strconv.Atoi(pod.Annotations[api.AnnotationConcurrency])
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// plausible reads the token's claims without verifying them and returns
// its expiry when they could be those of a live Pod-bound token for
// Audience: the apiserver verifies the rest.
func (k *KubeAuthenticator) plausible(token string) (time.Time, error) {
	var claims struct {
		Exp  int64    `json:"exp"`
		Aud  audience `json:"aud"`
		Kube struct {
			Pod struct {
				Name string `json:"name"`
				UID  string `json:"uid"`
			} `json:"pod"`
		} `json:"kubernetes.io"`
	}
	if err := jwtclaims.Decode(token, &claims); err != nil {
		return time.Time{}, err
	}
	now := time.Now()
	if k.Clock != nil {
		now = k.Clock.Now()
	}
	exp := time.Unix(claims.Exp, 0)
	switch {
	case claims.Exp == 0:
		return exp, errors.New("token has no expiry")
	case !exp.After(now):
		return exp, fmt.Errorf("token expired at %s", exp.UTC().Format(time.RFC3339))
	case !slices.Contains(claims.Aud, k.Audience):
		return exp, fmt.Errorf("token is not for audience %q", k.Audience)
	case claims.Kube.Pod.Name == "" || claims.Kube.Pod.UID == "":
		return exp, errors.New("token is not bound to a Pod")
	}
	return exp, nil
}

// audience is a JWT aud claim: one string or a list.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = audience{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("aud claim: %w", err)
	}
	*a = many
	return nil
}

// ownedByPool follows the Pod's controller references up to a Deployment
// labelled with the same pool.
func (k *KubeAuthenticator) ownedByPool(ctx context.Context, pod *corev1.Pod, pool string) error {
	rsRef := metav1.GetControllerOf(pod)
	if rsRef == nil || rsRef.Kind != "ReplicaSet" {
		return refuse(ReasonNotWorker, "Pod %s/%s is not owned by a ReplicaSet of pool %q", pod.Namespace, pod.Name, pool)
	}
	rs, err := k.Client.AppsV1().ReplicaSets(pod.Namespace).Get(ctx, rsRef.Name, metav1.GetOptions{})
	if err != nil {
		return apiRefusal(err, "owner of Pod %s/%s", pod.Namespace, pod.Name)
	}
	if rs.UID != rsRef.UID {
		return refuse(ReasonNotWorker, "ReplicaSet %s/%s was replaced", rs.Namespace, rs.Name)
	}
	depRef := metav1.GetControllerOf(rs)
	if depRef == nil || depRef.Kind != "Deployment" {
		return refuse(ReasonNotWorker, "ReplicaSet %s/%s is not owned by a Deployment of pool %q", rs.Namespace, rs.Name, pool)
	}
	dep, err := k.Client.AppsV1().Deployments(pod.Namespace).Get(ctx, depRef.Name, metav1.GetOptions{})
	if err != nil {
		return apiRefusal(err, "owner of ReplicaSet %s/%s", rs.Namespace, rs.Name)
	}
	if dep.UID != depRef.UID || dep.Labels[api.LabelPool] != pool {
		return refuse(ReasonNotWorker, "Deployment %s/%s is not the workload of pool %q", dep.Namespace, dep.Name, pool)
	}
	return nil
}

func serviceAccount(username string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(username, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	return namespace, name, ok && namespace != "" && name != ""
}

func one(vals authnv1.ExtraValue) string {
	if len(vals) != 1 {
		return ""
	}
	return vals[0]
}
