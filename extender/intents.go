package extender

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender/ledger"
)

// annotateClaim records on the Pod which placeholder it is about to take,
// so a successor extender keeps the claim if this one dies mid-bind.
func annotateClaim(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, ph ledger.Placeholder) error {
	// The UID makes the patch a precondition: it never lands on another
	// Pod that took the name.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         pod.UID,
		"annotations": map[string]string{api.AnnotationClaimedStock: ph.String()},
	}})
	if err != nil {
		return fmt.Errorf("encoding claim patch: %w", err)
	}
	if _, err := c.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("recording claim of placeholder %s/%s on Pod %s/%s: %w", ph.Namespace, ph.Name, pod.Namespace, pod.Name, err)
	}
	return nil
}

// intents writes claim annotations ahead of the bind: the filter that
// reserves a placeholder starts the patch, and the bind only waits for it.
// It takes one API write off the takeover's critical path.
type intents struct {
	clock clock.PassiveClock // ages intents for sweep
	mu    sync.Mutex
	m     map[types.UID]*intent
}

type intent struct {
	claim   string
	started time.Time
	done    chan struct{}
	err     error
}

func (in *intents) record(c kubernetes.Interface, pod *corev1.Pod, ph ledger.Placeholder) {
	claim := ph.String()
	if pod.Annotations[api.AnnotationClaimedStock] == claim {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.m == nil {
		in.m = map[types.UID]*intent{}
	}
	if it := in.m[pod.UID]; it != nil && it.claim == claim {
		return
	}
	it := &intent{claim: claim, started: in.clock.Now(), done: make(chan struct{})}
	in.m[pod.UID] = it
	pod = pod.DeepCopy()
	go func() {
		defer close(it.done)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		it.err = annotateClaim(ctx, c, pod, ph)
	}()
}

// wait reports whether the claim of ph is durably recorded on the Pod by
// an intent; false means the caller must record it.
func (in *intents) wait(ctx context.Context, uid types.UID, ph ledger.Placeholder) bool {
	in.mu.Lock()
	it := in.m[uid]
	in.mu.Unlock()
	if it == nil || it.claim != ph.String() {
		return false
	}
	select {
	case <-it.done:
		return it.err == nil
	case <-ctx.Done():
		return false
	}
}

func (in *intents) forget(uid types.UID) {
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.m, uid)
}

// sweep drops intents of Pods that never came to bind.
func (in *intents) sweep(maxAge time.Duration) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for uid, it := range in.m {
		if in.clock.Since(it.started) > maxAge {
			delete(in.m, uid)
		}
	}
}
