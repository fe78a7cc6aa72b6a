// Package pvc validates the runplane annotations of a PersistentVolumeClaim
// (DESIGN.md "PersistentVolumeClaims") at admission, so a bad preparation
// request is refused with a message naming the key, instead of failing
// later in a controller.
package pvc

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

// ValidateCreate checks a new claim.
func ValidateCreate(pvc *corev1.PersistentVolumeClaim) error {
	return Validate(pvc.Name, pvc.Annotations)
}

// ValidateUpdate checks an updated claim only when a configurable annotation
// changed: runplane's controllers write status annotations on claims that
// may predate this webhook, and those writes must never be refused.
func ValidateUpdate(old, pvc *corev1.PersistentVolumeClaim) error {
	changed := false
	for _, k := range Configurable {
		ov, ook := old.Annotations[k]
		nv, nok := pvc.Annotations[k]
		if ook != nok || ov != nv {
			changed = true
			break
		}
	}
	if !changed {
		return nil
	}
	return Validate(pvc.Name, pvc.Annotations)
}

var attemptRE = regexp.MustCompile(`^[0-9]+$`)

// Validate checks the configurable annotations of claim name (which may be
// empty for a claim created with generateName).
func Validate(name string, a map[string]string) error {
	image, hasImage := a[api.AnnotationPrepareFromImage]
	source, hasSource := a[api.AnnotationPrepareFromPVC]
	if hasImage && hasSource {
		return invalid(api.AnnotationPrepareFromImage, "cannot be combined with %s: prepare a claim either from an image or from another claim", api.AnnotationPrepareFromPVC)
	}
	if hasImage {
		if image == "" || strings.IndexFunc(image, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
			return invalid(api.AnnotationPrepareFromImage, "invalid image %q: it must be a non-empty container image reference without spaces, such as busybox:1.36", image)
		}
	}
	if hasSource {
		if errs := validation.IsDNS1123Subdomain(source); len(errs) > 0 {
			return invalid(api.AnnotationPrepareFromPVC, "invalid claim name %q: it must name a PersistentVolumeClaim in the same namespace: %s", source, strings.Join(errs, "; "))
		}
		if source == name {
			return invalid(api.AnnotationPrepareFromPVC, "names the claim itself (%q): it must name another PersistentVolumeClaim in the same namespace", source)
		}
	}
	for _, key := range []string{api.AnnotationPrepareCommand, api.AnnotationPrepareArgs} {
		v, ok := a[key]
		if !ok {
			continue
		}
		if !hasImage {
			return invalid(key, "only applies with %s (the Job it configures runs that image)", api.AnnotationPrepareFromImage)
		}
		list, err := StringArray(v)
		if err != nil {
			return invalid(key, "invalid value %q: it must be a JSON array of strings, such as [\"sh\", \"-c\", \"echo hi > /workspace/hello\"]: %v", v, err)
		}
		if key == api.AnnotationPrepareCommand && len(list) == 0 {
			return invalid(key, "empty command: give at least the program, such as [\"sh\", \"-c\", \"...\"], or remove the annotation to run the image's entrypoint")
		}
	}
	if v, ok := a[api.AnnotationPrepareAttempt]; ok {
		if !attemptRE.MatchString(v) {
			return invalid(api.AnnotationPrepareAttempt, "invalid value %q: it must be a non-negative integer such as 0 or 1 (bump it by one to retry a failed preparation)", v)
		}
		if _, err := strconv.ParseInt(v, 10, 32); err != nil {
			return invalid(api.AnnotationPrepareAttempt, "invalid value %q: it must be a non-negative integer below 2147483648", v)
		}
	}
	if v, ok := a[api.AnnotationAccessor]; ok && v != api.AccessorEnabled {
		return invalid(api.AnnotationAccessor, "invalid value %q: the only allowed value is %q (remove the annotation to disable the accessor)", v, api.AccessorEnabled)
	}
	return nil
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
