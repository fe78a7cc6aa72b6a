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
// so a successor extender keeps the claim if this one dies mid-bind. The
// UID makes the patch a precondition: it never lands on another Pod that
// took the name. A non-empty resourceVersion is one more: the patch
// applies only to the Pod as the caller saw it (an intent, which runs
// beside the bind: intents.record).
func annotateClaim(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, ph ledger.Placeholder, resourceVersion string) error {
	meta := map[string]any{
		"uid":         pod.UID,
		"annotations": map[string]string{api.AnnotationClaimedStock: ph.String()},
	}
	if resourceVersion != "" {
		meta["resourceVersion"] = resourceVersion
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
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
	// prev is the intent this one superseded while its patch was still in
	// flight: it may land after this one, so waiting means waiting for both.
	prev *intent
}

func (it *intent) finished() bool {
	select {
	case <-it.done:
		return true
	default:
		return false
	}
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
	old := in.m[pod.UID]
	if old != nil && old.claim == claim {
		return
	}
	for old != nil && old.finished() {
		old = old.prev
	}
	it := &intent{claim: claim, started: in.clock.Now(), done: make(chan struct{}), prev: old}
	in.m[pod.UID] = it
	pod = pod.DeepCopy()
	go func() {
		defer close(it.done)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// The filter's resourceVersion is the precondition: an intent that
		// lands late — after the Binding (a bind that gave up waiting for
		// it, a retry on a new leader while the old one's Binding went
		// through), or after an intent that superseded it — meets a newer
		// Pod and fails with a Conflict instead of rewriting the claim the
		// Binding or the newer intent recorded. A failed intent costs the
		// bind one annotation of its own (claim), nothing else.
		it.err = annotateClaim(ctx, c, pod, ph, pod.ResourceVersion)
	}()
}

// wait reports whether the claim of ph is durably recorded on the Pod by
// its latest intent, once every intent of the Pod has landed (or failed);
// false means the caller must record it.
func (in *intents) wait(ctx context.Context, uid types.UID, ph ledger.Placeholder) bool {
	in.mu.Lock()
	it := in.m[uid]
	in.mu.Unlock()
	if it == nil || it.claim != ph.String() {
		// An intent of another claim still in flight must not land after
		// the caller's own record.
		_, _ = in.settle(ctx, uid)
		return false
	}
	if _, err := in.settle(ctx, uid); err != nil {
		return false
	}
	return it.err == nil
}

// settle waits until no claim annotation of the Pod that intents started
// is still in flight, and reports whether there was any (the Pod may carry
// one of them). An error: ctx ended first.
func (in *intents) settle(ctx context.Context, uid types.UID) (bool, error) {
	in.mu.Lock()
	it := in.m[uid]
	in.mu.Unlock()
	for p := it; p != nil; p = p.prev {
		if p.finished() {
			continue
		}
		select {
		case <-p.done:
		case <-ctx.Done():
			return true, fmt.Errorf("waiting for its claim annotation (%s) to land: %w", p.claim, ctx.Err())
		}
	}
	return it != nil, nil
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
