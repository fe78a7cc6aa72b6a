package extender

import (
	"context"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runplane/runplane/api"
)

// refusal is why the extender will not act on the Pod a request names,
// with the HTTP status that says so.
type refusal struct {
	status int
	msg    string
}

func (r *refusal) Error() string { return r.msg }

// scheduledPod returns the Pod ns/name when it exists with the given UID
// and is scheduled by runplane's profile: /filter (which reserves capacity
// and records a claim on the Pod) and /bind act on nothing else, whatever
// a request body says. The Pod is the API server's (the informer's, or a
// GET when the informer lags), never the body's copy.
func (e *Extender) scheduledPod(ctx context.Context, ns, name string, uid types.UID) (*corev1.Pod, *refusal) {
	if ns == "" || name == "" || uid == "" {
		return nil, &refusal{http.StatusBadRequest, "the Pod's namespace, name and UID are required"}
	}
	pod, err := e.pod(ctx, ns, name, uid)
	switch {
	case apierrors.IsNotFound(err):
		return nil, &refusal{http.StatusNotFound, fmt.Sprintf("pod %s/%s not found", ns, name)}
	case isUIDMismatch(err):
		return nil, &refusal{http.StatusConflict, err.Error()}
	case err != nil:
		return nil, &refusal{http.StatusServiceUnavailable, err.Error()}
	}
	if pod.Spec.SchedulerName != api.SchedulerName {
		return nil, &refusal{http.StatusForbidden, fmt.Sprintf("pod %s/%s is scheduled by %q, not %s: the runplane extender does not act on it",
			ns, name, pod.Spec.SchedulerName, api.SchedulerName)}
	}
	return pod, nil
}
