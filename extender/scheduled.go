package extender

import (
	"context"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/refusal"
)

// scheduledPod returns the Pod ns/name when it exists with the given UID
// and is scheduled by runplane's profile: /filter (which reserves capacity
// and records a claim on the Pod) and /bind act on nothing else, whatever
// a request body says. The Pod is the API server's (the informer's, or a
// GET when the informer lags), never the body's copy.
func (e *Extender) scheduledPod(ctx context.Context, ns, name string, uid types.UID) (*corev1.Pod, *refusal.Error) {
	if ns == "" || name == "" || uid == "" {
		return nil, refusal.New(http.StatusBadRequest, "", "the Pod's namespace, name and UID are required")
	}
	pod, err := e.pod(ctx, ns, name, uid)
	switch {
	case apierrors.IsNotFound(err):
		return nil, refusal.New(http.StatusNotFound, "", "pod %s/%s not found", ns, name)
	case isUIDMismatch(err):
		return nil, &refusal.Error{Status: http.StatusConflict, Err: err}
	case err != nil:
		return nil, &refusal.Error{Status: http.StatusServiceUnavailable, Err: err}
	}
	if pod.Spec.SchedulerName != api.SchedulerName {
		return nil, refusal.New(http.StatusForbidden, "", "pod %s/%s is scheduled by %q, not %s: the runplane extender does not act on it",
			ns, name, pod.Spec.SchedulerName, api.SchedulerName)
	}
	return pod, nil
}
