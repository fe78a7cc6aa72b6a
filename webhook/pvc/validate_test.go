package pvc

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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

// A generic ephemeral volume's claim (controlled by its Pod) may not ask
// for preparation: its Pod exists already and would not wait for the data.
func TestEphemeralClaimsAreNotPrepared(t *testing.T) {
	owned := func(a map[string]string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "web-0-scratch", Annotations: a,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "web-0", UID: "u", Controller: ptr.To(true)}}}}
	}
	err := ValidateCreate(owned(map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}))
	var inv *pvcspec.InvalidError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, api.AnnotationPrepareFromImage, inv.Key)
	require.Contains(t, err.Error(), "generic ephemeral volumes cannot be prepared (the claim belongs to Pod web-0")
	require.NoError(t, ValidateCreate(owned(nil)), "an ephemeral claim without runplane keys")
}
