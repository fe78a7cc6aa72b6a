package storage

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/pvcspec"
)

// maxChain bounds how far a prepare-from-pvc chain is followed; a longer
// chain of unprepared PVCs is reported as if it were a cycle.
const maxChain = 100

// source is what a cycle search needs to know of one PVC.
type source struct {
	from  string // its prepare-from-pvc, "" when none
	ready bool   // prepared (or asks for no preparation): a copy from it can start
}

// findCycle follows prepare-from-pvc from start through PVCs that are not
// ready. It returns the names around the cycle that leads back to start
// (start first and last), or nil when the chain ends: at a ready PVC, a
// missing one, or one prepared from an image. A cycle that does not pass
// through start is its members' to report; start merely waits. long is
// true when the chain exceeds maxChain.
func findCycle(start, from string, lookup func(name string) (source, bool, error)) (cycle []string, long bool, err error) {
	path := []string{start}
	seen := map[string]bool{start: true}
	for cur := from; cur != ""; {
		if cur == start {
			return append(path, start), false, nil
		}
		if seen[cur] {
			return nil, false, nil
		}
		if len(path) > maxChain {
			return path, true, nil
		}
		src, found, err := lookup(cur)
		if err != nil || !found || src.ready {
			return nil, false, err
		}
		seen[cur] = true
		path = append(path, cur)
		cur = src.from
	}
	return nil, false, nil
}

// cycleMessage explains a cycle, or a chain too long to follow, for the
// PVC's status and its Warning Event.
func cycleMessage(cycle []string, long bool) string {
	if long {
		return fmt.Sprintf("%s chain longer than %d PVCs, none prepared (%s → ...): shorten it, then bump %s",
			api.AnnotationPrepareFromPVC, maxChain, strings.Join(cycle[:3], " → "), api.AnnotationPrepareAttempt)
	}
	return fmt.Sprintf("%s cycle: %s: none of these PVCs can ever be prepared; point one of them at a prepared PVC or an image, then bump %s",
		api.AnnotationPrepareFromPVC, strings.Join(cycle, " → "), api.AnnotationPrepareAttempt)
}

// sourceCycle looks for a cycle through pvc in the controller's cache.
func (r *Reconciler) sourceCycle(ctx context.Context, pvc *corev1.PersistentVolumeClaim, from string) ([]string, bool, error) {
	return findCycle(pvc.Name, from, func(name string) (source, bool, error) {
		var p corev1.PersistentVolumeClaim
		err := r.Get(ctx, types.NamespacedName{Namespace: pvc.Namespace, Name: name}, &p)
		if apierrors.IsNotFound(err) {
			return source{}, false, nil
		}
		if err != nil {
			return source{}, false, fmt.Errorf("getting PVC %s: %w", name, err)
		}
		return source{from: p.Annotations[api.AnnotationPrepareFromPVC], ready: pvcspec.Ready(&p)}, true, nil
	})
}
