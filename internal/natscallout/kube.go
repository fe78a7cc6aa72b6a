package natscallout

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/runplane/runplane/api"
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
type KubeAuthenticator struct {
	Client   kubernetes.Interface
	Audience string
}

// Authenticate implements Authenticator.
func (k *KubeAuthenticator) Authenticate(ctx context.Context, token string) (Identity, error) {
	review, err := k.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{k.Audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, fmt.Errorf("reviewing the token: %w", err)
	}
	st := review.Status
	if !st.Authenticated {
		return Identity{}, fmt.Errorf("token not authenticated: %s", st.Error)
	}
	if !slices.Contains(st.Audiences, k.Audience) {
		return Identity{}, fmt.Errorf("token is not for audience %q", k.Audience)
	}
	ns, sa, ok := serviceAccount(st.User.Username)
	if !ok {
		return Identity{}, fmt.Errorf("%q is not a ServiceAccount", st.User.Username)
	}
	podName, podUID := one(st.User.Extra[extraPodName]), one(st.User.Extra[extraPodUID])
	if podName == "" || podUID == "" {
		return Identity{}, fmt.Errorf("token of %s/%s is not bound to a Pod", ns, sa)
	}
	id := Identity{Name: ns + "/" + podName, Namespace: ns, Worker: podName}
	pod, err := k.Client.CoreV1().Pods(ns).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return id, fmt.Errorf("bound Pod %s: %w", id.Name, err)
	}
	if string(pod.UID) != podUID {
		return id, fmt.Errorf("bound Pod %s was replaced (UID %s, token for %s)", id.Name, pod.UID, podUID)
	}
	if pod.Spec.ServiceAccountName != sa {
		return id, fmt.Errorf("Pod %s runs as %q, token is of %q", id.Name, pod.Spec.ServiceAccountName, sa)
	}
	id.Pool = pod.Labels[api.LabelPool]
	if id.Pool == "" {
		return id, fmt.Errorf("Pod %s is not a pool worker (no %s label)", id.Name, api.LabelPool)
	}
	if err := k.ownedByPool(ctx, pod, id.Pool); err != nil {
		return id, err
	}
	id.Expires, err = expiry(token)
	return id, err
}

// ownedByPool follows the Pod's controller references up to a Deployment
// labelled with the same pool.
func (k *KubeAuthenticator) ownedByPool(ctx context.Context, pod *corev1.Pod, pool string) error {
	rsRef := metav1.GetControllerOf(pod)
	if rsRef == nil || rsRef.Kind != "ReplicaSet" {
		return fmt.Errorf("Pod %s/%s is not owned by a ReplicaSet of pool %q", pod.Namespace, pod.Name, pool)
	}
	rs, err := k.Client.AppsV1().ReplicaSets(pod.Namespace).Get(ctx, rsRef.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("owner of Pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if rs.UID != rsRef.UID {
		return fmt.Errorf("ReplicaSet %s/%s was replaced", rs.Namespace, rs.Name)
	}
	depRef := metav1.GetControllerOf(rs)
	if depRef == nil || depRef.Kind != "Deployment" {
		return fmt.Errorf("ReplicaSet %s/%s is not owned by a Deployment of pool %q", rs.Namespace, rs.Name, pool)
	}
	dep, err := k.Client.AppsV1().Deployments(pod.Namespace).Get(ctx, depRef.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("owner of ReplicaSet %s/%s: %w", rs.Namespace, rs.Name, err)
	}
	if dep.UID != depRef.UID || dep.Labels[api.LabelPool] != pool {
		return fmt.Errorf("Deployment %s/%s is not the workload of pool %q", dep.Namespace, dep.Name, pool)
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

// expiry reads the exp claim of a token the apiserver has just accepted:
// TokenReview vouched for its signature, it does not report the expiry.
func expiry(token string) (time.Time, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, errors.New("token is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, fmt.Errorf("decoding the token's claims: %w", err)
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return time.Time{}, fmt.Errorf("decoding the token's claims: %w", err)
	}
	if claims.Exp == 0 {
		return time.Time{}, errors.New("token has no expiry")
	}
	return time.Unix(claims.Exp, 0), nil
}
