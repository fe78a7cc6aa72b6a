// Package storage prepares PersistentVolumeClaims from their annotations
// (DESIGN.md "PersistentVolumeClaims"): runplane.io/prepare-from-image runs a
// Job with the PVC at /workspace; runplane.io/prepare-from-pvc runs a copy Job
// (runplane-copy) once its source is ready. Progress is reported in the
// prepare-* annotations and in Events; bumping runplane.io/prepare-attempt
// starts exactly one new attempt. The annotations are parsed by pvcspec, the
// same rules admission applies: a claim admission would deny is reported
// Failed (PrepareInvalid), never silently skipped.
//
// Idempotency comes from names, not memory: the Job of an attempt is named
// from the PVC and the attempt, so a restarted controller finds the Job it
// made instead of creating another.
package storage

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/runplane/runplane/pvcspec"
)

// desired is what the controller makes of a PVC: ok is false when it asks
// for no preparation; err is the pvcspec error when its request is invalid.
// attempt is the attempt to record then: the one asked for when that key
// alone parses, so fixing the annotations needs a bump like any failed
// attempt.
func desired(pvc *corev1.PersistentVolumeClaim) (spec pvcspec.Spec, attempt string, ok bool, err error) {
	if !pvcspec.WantsPreparation(pvc) {
		return pvcspec.Spec{}, "", false, nil
	}
	spec, err = pvcspec.ParseClaim(pvc)
	if err != nil {
		if n, aerr := pvcspec.Attempt(pvc.Annotations); aerr == nil {
			attempt = strconv.FormatInt(n, 10)
		}
		return pvcspec.Spec{}, attempt, true, err
	}
	return spec, strconv.FormatInt(spec.Attempt, 10), true, nil
}

// JobName is the deterministic name of a PVC's prepare Job for an attempt.
// It fits in 63 characters, because Kubernetes copies it into a label value
// of the Job's Pods.
func JobName(pvc string, attempt int64) string {
	return boundedName("prepare-"+pvc, "-"+strconv.FormatInt(attempt, 10))
}

func boundedName(base, suffix string) string {
	const limit = 63
	if len(base)+len(suffix) <= limit {
		return base + suffix
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(base))
	hash := fmt.Sprintf("%08x", h.Sum32())
	keep := limit - len(suffix) - len(hash) - 1
	return strings.TrimRight(base[:keep], "-.") + "-" + hash + suffix
}
