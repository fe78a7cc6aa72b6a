// Package pvcspec owns the runplane annotations of a PersistentVolumeClaim
// (DESIGN.md "PersistentVolumeClaims"): the preparation request
// (prepare-from-image, prepare-command, prepare-args, prepare-from-pvc,
// prepare-attempt), the accessor switch, and the written status
// (prepare-phase, prepare-observed-attempt, ...). It parses, validates and
// decides readiness in one place, so admission (webhook/pvc), the storage
// gate (webhook/mutate), the preparation controller (controllers/storage) and
// the gate controller (controllers/gate) cannot drift apart. It depends on
// k8s.io/api types and the api constants only: the webhook imports it and
// must not pull in controller-runtime.
//
// The rule, one for every caller (the strict one of what each used to do):
//
//   - Presence, not emptiness, counts. A configurable key that is present is
//     validated even when its value is empty: `prepare-from-image: ""`,
//     `prepare-from-pvc: ""`, `prepare-attempt: ""` and `accessor: ""` are
//     invalid, never read as "absent". A claim asks for preparation when
//     prepare-from-image or prepare-from-pvc is present.
//   - prepare-command and prepare-args are JSON arrays whose elements are all
//     strings; `null`, a null element and a non-string element are invalid.
//     The command must not be empty (remove it to run the image's
//     entrypoint); args may be `[]`. Both only apply with prepare-from-image.
//   - prepare-from-image is a non-empty image reference without whitespace or
//     control characters; prepare-from-pvc is a DNS-1123 subdomain naming
//     another claim; the two are exclusive.
//   - prepare-attempt is decimal digits only (no sign, no spaces) below
//     2^31; absent means 0. It is validated even without a source.
//   - accessor allows exactly "enabled".
//
// Parse accepts exactly what admission admits; the controller treats a claim
// that Parse rejects as a failed preparation (PrepareInvalid) and never as
// "nothing to do", so what admission accepts the controller accepts, and
// what the controller rejects admission denies. Written keys are not
// validated: the controllers' status writes must never be refused.
package pvcspec

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/runplane/runplane/api"
)

// InvalidError names the annotation and what it allows.
type InvalidError struct {
	Key    string
	Reason string
}

func (e *InvalidError) Error() string { return fmt.Sprintf("annotation %s: %s", e.Key, e.Reason) }

func invalid(key, format string, args ...any) error {
	return &InvalidError{Key: key, Reason: fmt.Sprintf(format, args...)}
}

// Configurable lists the annotations a user sets (runplane writes the rest).
var Configurable = []string{
	api.AnnotationPrepareFromImage,
	api.AnnotationPrepareCommand,
	api.AnnotationPrepareArgs,
	api.AnnotationPrepareFromPVC,
	api.AnnotationPrepareAttempt,
	api.AnnotationAccessor,
}

// Spec is a claim's parsed configuration. A zero FromImage and FromPVC means
// no preparation is asked for.
type Spec struct {
	FromImage string
	Command   []string // nil: the image's entrypoint
	Args      []string
	FromPVC   string
	Attempt   int64 // the attempt the user asks for; absent = 0
	Accessor  bool
}

// Prepares reports whether the spec asks for a preparation.
func (s Spec) Prepares() bool { return s.FromImage != "" || s.FromPVC != "" }

// ParseClaim parses a claim's annotations; see Parse.
func ParseClaim(pvc *corev1.PersistentVolumeClaim) (Spec, error) {
	return Parse(pvc.Name, pvc.Annotations)
}

// Parse validates and reads the configurable annotations of the claim name
// (empty for a claim created with generateName). The error is an
// *InvalidError naming the first bad key and what it allows; the Spec is the
// zero Spec then.
func Parse(name string, a map[string]string) (Spec, error) {
	var s Spec
	image, hasImage := a[api.AnnotationPrepareFromImage]
	source, hasSource := a[api.AnnotationPrepareFromPVC]
	if hasImage && hasSource {
		return Spec{}, invalid(api.AnnotationPrepareFromImage, "cannot be combined with %s: prepare a claim either from an image or from another claim", api.AnnotationPrepareFromPVC)
	}
	if hasImage {
		if image == "" || strings.IndexFunc(image, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
			return Spec{}, invalid(api.AnnotationPrepareFromImage, "invalid image %q: it must be a non-empty container image reference without spaces, such as busybox:1.36", image)
		}
		s.FromImage = image
	}
	if hasSource {
		if errs := validation.IsDNS1123Subdomain(source); len(errs) > 0 {
			return Spec{}, invalid(api.AnnotationPrepareFromPVC, "invalid claim name %q: it must name a PersistentVolumeClaim in the same namespace: %s", source, strings.Join(errs, "; "))
		}
		if source == name {
			return Spec{}, invalid(api.AnnotationPrepareFromPVC, "names the claim itself (%q): it must name another PersistentVolumeClaim in the same namespace", source)
		}
		s.FromPVC = source
	}
	for _, key := range []string{api.AnnotationPrepareCommand, api.AnnotationPrepareArgs} {
		v, ok := a[key]
		if !ok {
			continue
		}
		if !hasImage {
			return Spec{}, invalid(key, "only applies with %s (the Job it configures runs that image)", api.AnnotationPrepareFromImage)
		}
		list, err := StringArray(v)
		if err != nil {
			return Spec{}, invalid(key, "invalid value %q: it must be a JSON array of strings, such as [\"sh\", \"-c\", \"echo hi > /workspace/hello\"]: %v", v, err)
		}
		if key == api.AnnotationPrepareCommand {
			if len(list) == 0 {
				return Spec{}, invalid(key, "empty command: give at least the program, such as [\"sh\", \"-c\", \"...\"], or remove the annotation to run the image's entrypoint")
			}
			s.Command = list
		} else {
			s.Args = list
		}
	}
	attempt, err := Attempt(a)
	if err != nil {
		return Spec{}, err
	}
	s.Attempt = attempt
	if v, ok := a[api.AnnotationAccessor]; ok {
		if v != api.AccessorEnabled {
			return Spec{}, invalid(api.AnnotationAccessor, "invalid value %q: the only allowed value is %q (remove the annotation to disable the accessor)", v, api.AccessorEnabled)
		}
		s.Accessor = true
	}
	return s, nil
}

var attemptRE = regexp.MustCompile(`^[0-9]+$`)

// Attempt reads runplane.io/prepare-attempt alone: absent means 0. The
// controller records it even when another key is invalid, so that fixing
// the annotations needs a bump like any failed attempt.
func Attempt(a map[string]string) (int64, error) {
	v, ok := a[api.AnnotationPrepareAttempt]
	if !ok {
		return 0, nil
	}
	if !attemptRE.MatchString(v) {
		return 0, invalid(api.AnnotationPrepareAttempt, "invalid value %q: it must be a non-negative integer such as 0 or 1 (bump it by one to retry a failed preparation)", v)
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0, invalid(api.AnnotationPrepareAttempt, "invalid value %q: it must be a non-negative integer below 2147483648", v)
	}
	return n, nil
}

// StringArray parses a JSON array of strings; null and non-string elements
// are refused.
func StringArray(v string) ([]string, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, fmt.Errorf("not a JSON array: %w", err)
	}
	if raw == nil {
		return nil, fmt.Errorf("null is not an array")
	}
	out := make([]string, len(raw))
	for i, r := range raw {
		if len(r) == 0 || r[0] != '"' {
			return nil, fmt.Errorf("element %d is %s, not a string", i, r)
		}
		if err := json.Unmarshal(r, &out[i]); err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
	}
	return out, nil
}

// WantsPreparation reports whether the claim asks for preparation: a
// source key is present, valid or not (an invalid request is a failed
// preparation, not an absent one).
func WantsPreparation(pvc *corev1.PersistentVolumeClaim) bool {
	_, image := pvc.Annotations[api.AnnotationPrepareFromImage]
	_, source := pvc.Annotations[api.AnnotationPrepareFromPVC]
	return image || source
}

// Status is what the preparation controller wrote in a claim's annotations.
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

// Ready reports whether the claim's data can be used: it asks for no
// preparation, or its annotations are valid and the attempt it asks for has
// Succeeded (prepare-phase Succeeded, prepare-observed-attempt = attempt).
func Ready(pvc *corev1.PersistentVolumeClaim) bool {
	if !WantsPreparation(pvc) {
		return true
	}
	s, err := ParseClaim(pvc)
	if err != nil {
		return false
	}
	st := StatusOf(pvc)
	return st.Phase == api.PhaseSucceeded && st.ObservedAttempt == strconv.FormatInt(s.Attempt, 10)
}

// NeedsPreparation reports whether a Pod mounting the claim must wait: it
// asks for preparation and is not Ready. An invalid request waits too; the
// controller cannot prepare it either.
func NeedsPreparation(pvc *corev1.PersistentVolumeClaim) bool {
	return WantsPreparation(pvc) && !Ready(pvc)
}

// Failed reports whether the claim's preparation cannot succeed without the
// user's action, and why: its annotations are invalid, or the attempt it
// asks for has Failed.
func Failed(pvc *corev1.PersistentVolumeClaim) (bool, string) {
	if !WantsPreparation(pvc) {
		return false, ""
	}
	s, err := ParseClaim(pvc)
	if err != nil {
		return true, err.Error()
	}
	st := StatusOf(pvc)
	return st.Phase == api.PhaseFailed && st.ObservedAttempt == strconv.FormatInt(s.Attempt, 10), st.Message
}
