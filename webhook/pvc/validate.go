// Package pvc is the admission side of the runplane annotations of a
// PersistentVolumeClaim (DESIGN.md "PersistentVolumeClaims"): a bad
// preparation request is refused with a message naming the key, instead of
// failing later in a controller. The rules themselves live in pvcspec, which
// the controllers share; this package only decides when to apply them.
package pvc

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/pvcspec"
)

// ValidateCreate checks a new claim.
func ValidateCreate(pvc *corev1.PersistentVolumeClaim) error {
	// A generic ephemeral volume's claim is made for one Pod that already
	// exists: nothing would hold that Pod until the claim is prepared.
	if owner := metav1.GetControllerOf(pvc); owner != nil && owner.Kind == "Pod" {
		for _, k := range pvcspec.Configurable {
			if _, ok := pvc.Annotations[k]; ok {
				return &pvcspec.InvalidError{Key: k, Reason: fmt.Sprintf("generic ephemeral volumes cannot be prepared (the claim belongs to Pod %s, "+
					"which would start before its data); use a PersistentVolumeClaim of its own", owner.Name)}
			}
		}
	}
	return Validate(pvc.Name, pvc.Annotations)
}

// ValidateUpdate checks an updated claim only when a configurable annotation
// changed: runplane's controllers write status annotations on claims that
// may predate this webhook, and those writes must never be refused.
func ValidateUpdate(old, pvc *corev1.PersistentVolumeClaim) error {
	changed := false
	for _, k := range pvcspec.Configurable {
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

// Validate checks the configurable annotations of claim name (which may be
// empty for a claim created with generateName). The error is a
// *pvcspec.InvalidError.
func Validate(name string, a map[string]string) error {
	_, err := pvcspec.Parse(name, a)
	return err
}
