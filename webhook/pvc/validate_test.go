package pvc

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/pvcspec"
)

// The rules are tested in pvcspec; this tests when admission applies them.
func TestValidateUpdate(t *testing.T) {
	bad := map[string]string{api.AnnotationPrepareFromImage: "b", api.AnnotationPrepareFromPVC: "c"}
	withPhase := map[string]string{api.AnnotationPrepareFromImage: "b", api.AnnotationPrepareFromPVC: "c", api.AnnotationPreparePhase: api.PhaseFailed}
	claim := func(a map[string]string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Annotations: a}}
	}
	// A controller's status write on a claim that predates the webhook.
	if err := ValidateUpdate(claim(bad), claim(withPhase)); err != nil {
		t.Fatalf("status-only update refused: %v", err)
	}
	// A user edit is validated.
	if err := ValidateUpdate(claim(nil), claim(bad)); err == nil {
		t.Fatal("bad user edit admitted")
	}
	// Bumping the attempt to a bad value is refused.
	if err := ValidateUpdate(claim(map[string]string{api.AnnotationPrepareAttempt: "1"}), claim(map[string]string{api.AnnotationPrepareAttempt: "x"})); err == nil {
		t.Fatal("bad attempt admitted")
	}
	// Adding an empty value is a change, and empty is not absent.
	err := ValidateUpdate(claim(nil), claim(map[string]string{api.AnnotationPrepareFromImage: ""}))
	var inv *pvcspec.InvalidError
	if !errors.As(err, &inv) || inv.Key != api.AnnotationPrepareFromImage {
		t.Fatalf("empty image added: got %v, want an error naming %s", err, api.AnnotationPrepareFromImage)
	}
	// The claim's own name is checked on create.
	self := claim(map[string]string{api.AnnotationPrepareFromPVC: "data"})
	if err := ValidateCreate(self); !errors.As(err, &inv) || inv.Key != api.AnnotationPrepareFromPVC {
		t.Fatalf("claim prepared from itself: got %v", err)
	}
}
