// Package storage prepares PersistentVolumeClaims from their annotations
// (DESIGN.md "PersistentVolumeClaims"): runplane.io/prepare-from-image runs a
// Job with the PVC at /workspace; runplane.io/prepare-from-pvc runs a copy Job
// (runplane-copy) once its source is ready. Progress is reported in the
// prepare-* annotations and in Events; bumping runplane.io/prepare-attempt
// starts exactly one new attempt.
//
// Idempotency comes from names, not memory: the Job of an attempt is named
// from the PVC and the attempt, so a restarted controller finds the Job it
// made instead of creating another.
package storage

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/runplane/runplane/api"
)

// Source kinds of a preparation.
const (
	FromImage = "image"
	FromPVC   = "pvc"
)

// Spec is a PVC's preparation request, parsed from its annotations.
type Spec struct {
	Kind    string // FromImage or FromPVC
	Image   string
	Command []string
	Args    []string
	FromPVC string
	Attempt int64
}

// HasPrepare reports whether the PVC asks for any preparation.
func HasPrepare(pvc *corev1.PersistentVolumeClaim) bool {
	a := pvc.Annotations
	return a[api.AnnotationPrepareFromImage] != "" || a[api.AnnotationPrepareFromPVC] != ""
}

// ParseAttempt reads runplane.io/prepare-attempt: absent means 0.
func ParseAttempt(v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s: %q is not a non-negative integer", api.AnnotationPrepareAttempt, v)
	}
	return n, nil
}

// ParseSpec reads the preparation annotations. It returns nil, nil when the
// PVC asks for no preparation, and an error naming the key on bad input.
func ParseSpec(pvc *corev1.PersistentVolumeClaim) (*Spec, error) {
	if !HasPrepare(pvc) {
		return nil, nil
	}
	a := pvc.Annotations
	attempt, err := ParseAttempt(a[api.AnnotationPrepareAttempt])
	if err != nil {
		return nil, err
	}
	s := &Spec{Attempt: attempt, Image: a[api.AnnotationPrepareFromImage], FromPVC: a[api.AnnotationPrepareFromPVC]}
	switch {
	case s.Image != "" && s.FromPVC != "":
		return s, fmt.Errorf("%s and %s are exclusive: set one of them", api.AnnotationPrepareFromImage, api.AnnotationPrepareFromPVC)
	case s.FromPVC == pvc.Name:
		return s, fmt.Errorf("%s: a PVC cannot be prepared from itself", api.AnnotationPrepareFromPVC)
	case s.FromPVC != "":
		s.Kind = FromPVC
		return s, nil
	}
	s.Kind = FromImage
	for key, dst := range map[string]*[]string{api.AnnotationPrepareCommand: &s.Command, api.AnnotationPrepareArgs: &s.Args} {
		v, ok := a[key]
		if !ok {
			continue
		}
		if err := json.Unmarshal([]byte(v), dst); err != nil {
			return s, fmt.Errorf("%s: %q is not a JSON array of strings: %w", key, v, err)
		}
	}
	return s, nil
}

// Status is what the controller reported in the PVC's annotations.
type Status struct {
	Phase, Job, Message string
	ObservedAttempt     string
}

// StatusOf reads the written prepare-* annotations.
func StatusOf(pvc *corev1.PersistentVolumeClaim) Status {
	a := pvc.Annotations
	return Status{Phase: a[api.AnnotationPreparePhase], Job: a[api.AnnotationPrepareJob],
		Message: a[api.AnnotationPrepareMessage], ObservedAttempt: a[api.AnnotationPrepareObservedAttempt]}
}

// Ready reports whether the PVC's data can be used: it asks for no
// preparation, or the current attempt has Succeeded.
func Ready(pvc *corev1.PersistentVolumeClaim) bool {
	if !HasPrepare(pvc) {
		return true
	}
	st := StatusOf(pvc)
	attempt, err := ParseAttempt(pvc.Annotations[api.AnnotationPrepareAttempt])
	return err == nil && st.Phase == api.PhaseSucceeded && st.ObservedAttempt == strconv.FormatInt(attempt, 10)
}

// Failed reports whether the current attempt has Failed, and why.
func Failed(pvc *corev1.PersistentVolumeClaim) (bool, string) {
	if !HasPrepare(pvc) {
		return false, ""
	}
	st := StatusOf(pvc)
	attempt, err := ParseAttempt(pvc.Annotations[api.AnnotationPrepareAttempt])
	if err != nil {
		return true, err.Error()
	}
	return st.Phase == api.PhaseFailed && st.ObservedAttempt == strconv.FormatInt(attempt, 10), st.Message
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
