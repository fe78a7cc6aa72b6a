package storage

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/pvcspec"
	"github.com/runplane/runplane/webhook/pvc"
)

func TestJobName(t *testing.T) {
	long := strings.Repeat("a", 80)
	tests := []struct {
		pvc     string
		attempt int64
		want    string
	}{
		{"data", 0, "prepare-data-0"},
		{"data", 12, "prepare-data-12"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, JobName(tt.pvc, tt.attempt), "JobName(%q, %d)", tt.pvc, tt.attempt)
	}
	a, b := JobName(long, 3), JobName(long+"b", 3)
	assert.LessOrEqual(t, len(a), 63)
	assert.LessOrEqual(t, len(b), 63)
	assert.NotEqual(t, a, b, "distinct")
	assert.True(t, strings.HasSuffix(a, "-3"), "%q ends in the attempt", a)
	assert.Equal(t, a, JobName(long, 3), "deterministic")
}

// TestAdmissionAndControllerAgree feeds pvcspec's shared table
// (pvcspec/testdata/cases.json) to the webhook's validation and to what
// this controller makes of the same claim. Admission may deny a claim the
// controller has nothing to do with (a bad accessor value without a
// preparation); for a claim that asks for preparation the two decide alike,
// with the same message, and an admitted claim's Job runs exactly what the
// annotations say.
func TestAdmissionAndControllerAgree(t *testing.T) {
	raw, err := os.ReadFile("../../pvcspec/testdata/cases.json")
	require.NoError(t, err)
	var cases []struct {
		Name string            `json:"name"`
		A    map[string]string `json:"annotations"`
	}
	require.NoError(t, json.Unmarshal(raw, &cases), "shared table")
	require.GreaterOrEqual(t, len(cases), 30, "shared table")
	r := &Reconciler{Options: Options{Image: "runplane:test"}}
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", Annotations: tt.A}}
			denied := pvc.ValidateCreate(claim)
			spec, attempt, asks, rejected := desired(claim)
			if denied != nil {
				var inv *pvcspec.InvalidError
				require.ErrorAs(t, denied, &inv, "admission error")
			}
			if !asks {
				require.NoError(t, rejected, "controller rejects a claim that asks for no preparation")
				require.False(t, pvcspec.NeedsPreparation(claim), "a claim without preparation is gated")
				require.True(t, pvcspec.Ready(claim), "a claim without preparation is gated")
				return
			}
			if denied != nil || rejected != nil {
				require.Error(t, denied, "admission admits what the controller rejects")
				require.Error(t, rejected, "the controller would prepare what admission denies")
				require.Equal(t, denied.Error(), rejected.Error(), "messages differ")
				require.True(t, pvcspec.NeedsPreparation(claim), "an invalid preparation request does not hold Pods")
				return
			}
			// Admitted: the Job does what was asked, and readiness follows
			// the attempt the controller records.
			c := r.jobFor(claim, spec, JobName(claim.Name, spec.Attempt)).Spec.Template.Spec.Containers[0]
			if src := tt.A[api.AnnotationPrepareFromPVC]; src != "" {
				require.Equal(t, r.Image, c.Image, "copy Job image")
				require.Equal(t, src, spec.FromPVC, "copy Job source")
			} else {
				want := func(key string) []string {
					v, ok := tt.A[key]
					if !ok {
						return nil
					}
					var l []string
					require.NoError(t, json.Unmarshal([]byte(v), &l), "admitted %s %q", key, v)
					return l
				}
				require.Equal(t, tt.A[api.AnnotationPrepareFromImage], c.Image)
				require.Equal(t, want(api.AnnotationPrepareCommand), c.Command)
				require.Equal(t, want(api.AnnotationPrepareArgs), c.Args)
			}
			require.True(t, pvcspec.NeedsPreparation(claim), "a claim not yet prepared does not hold Pods")
			done := claim.DeepCopy()
			done.Annotations[api.AnnotationPreparePhase] = api.PhaseSucceeded
			done.Annotations[api.AnnotationPrepareObservedAttempt] = attempt
			require.True(t, pvcspec.Ready(done), "attempt %s recorded Succeeded, but the claim is not ready", attempt)
			require.False(t, pvcspec.NeedsPreparation(done), "attempt %s recorded Succeeded, but the claim holds Pods", attempt)
		})
	}
}

// An invalid request records the attempt the user asked for when that key
// parses, and the previous one otherwise (the attempt itself is invalid).
func TestDesiredAttemptOfInvalid(t *testing.T) {
	tests := []struct {
		a    map[string]string
		want string
	}{
		{map[string]string{api.AnnotationPrepareFromImage: "b", api.AnnotationPrepareFromPVC: "c", api.AnnotationPrepareAttempt: "4"}, "4"},
		{map[string]string{api.AnnotationPrepareFromImage: "b", api.AnnotationPrepareCommand: "null"}, "0"},
		{map[string]string{api.AnnotationPrepareFromImage: "b", api.AnnotationPrepareAttempt: "x"}, ""},
	}
	for _, tt := range tests {
		claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Annotations: tt.a}}
		_, attempt, asks, err := desired(claim)
		assert.True(t, asks, "%v", tt.a)
		assert.Error(t, err, "%v", tt.a)
		assert.Equal(t, tt.want, attempt, "%v", tt.a)
	}
}
