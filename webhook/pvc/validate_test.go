package pvc

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/pvcspec"
)

// The rules are tested in pvcspec; this tests when admission applies them.
func TestValidate(t *testing.T) {
	bad := map[string]string{api.AnnotationPrepareFromImage: "b", api.AnnotationPrepareFromPVC: "c"}
	withPhase := map[string]string{api.AnnotationPrepareFromImage: "b", api.AnnotationPrepareFromPVC: "c", api.AnnotationPreparePhase: api.PhaseFailed}
	claim := func(a map[string]string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Annotations: a}}
	}
	tests := []struct {
		name     string
		old, cur map[string]string // old nil: a create
		create   bool
		wantKey  string // the annotation an *pvcspec.InvalidError names; "" admits
		anyError bool
	}{
		{name: "a controller's status write on a claim that predates the webhook", old: bad, cur: withPhase},
		{name: "a user edit is validated", old: map[string]string{}, cur: bad, anyError: true},
		{name: "bumping the attempt to a bad value", old: map[string]string{api.AnnotationPrepareAttempt: "1"}, cur: map[string]string{api.AnnotationPrepareAttempt: "x"}, wantKey: api.AnnotationPrepareAttempt},
		{name: "adding an empty value: empty is not absent", old: map[string]string{}, cur: map[string]string{api.AnnotationPrepareFromImage: ""}, wantKey: api.AnnotationPrepareFromImage},
		{name: "prepared from itself, on create", create: true, cur: map[string]string{api.AnnotationPrepareFromPVC: "data"}, wantKey: api.AnnotationPrepareFromPVC},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.create {
				err = ValidateCreate(claim(tc.cur))
			} else {
				err = ValidateUpdate(claim(tc.old), claim(tc.cur))
			}
			switch {
			case tc.anyError:
				require.Error(t, err)
			case tc.wantKey == "":
				require.NoError(t, err)
			default:
				var inv *pvcspec.InvalidError
				require.ErrorAs(t, err, &inv)
				require.Equal(t, tc.wantKey, inv.Key)
			}
		})
	}
}
