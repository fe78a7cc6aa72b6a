package storage

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
		if got := JobName(tt.pvc, tt.attempt); got != tt.want {
			t.Errorf("JobName(%q, %d) = %q, want %q", tt.pvc, tt.attempt, got, tt.want)
		}
	}
	a, b := JobName(long, 3), JobName(long+"b", 3)
	if len(a) > 63 || len(b) > 63 || a == b || !strings.HasSuffix(a, "-3") || JobName(long, 3) != a {
		t.Errorf("long names not bounded, distinct and deterministic: %q %q", a, b)
	}
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
	if err := json.Unmarshal(raw, &cases); err != nil || len(cases) < 30 {
		t.Fatalf("shared table: %d cases, %v", len(cases), err)
	}
	r := &Reconciler{Options: Options{Image: "runplane:test"}}
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns", Annotations: tt.A}}
			denied := pvc.ValidateCreate(claim)
			spec, attempt, asks, rejected := desired(claim)
			if denied != nil {
				var inv *pvcspec.InvalidError
				if !errors.As(denied, &inv) {
					t.Fatalf("admission error %v is not a *pvcspec.InvalidError", denied)
				}
			}
			if !asks {
				if rejected != nil {
					t.Fatalf("controller rejects a claim that asks for no preparation: %v", rejected)
				}
				if pvcspec.NeedsPreparation(claim) || !pvcspec.Ready(claim) {
					t.Fatal("a claim without preparation is gated")
				}
				return
			}
			switch {
			case denied != nil && rejected == nil:
				t.Fatalf("admission denies (%v) what the controller would prepare", denied)
			case denied == nil && rejected != nil:
				t.Fatalf("the controller rejects (%v) what admission admits", rejected)
			case denied != nil:
				if denied.Error() != rejected.Error() {
					t.Fatalf("messages differ:\nadmission:  %v\ncontroller: %v", denied, rejected)
				}
				if !pvcspec.NeedsPreparation(claim) {
					t.Fatal("an invalid preparation request does not hold Pods")
				}
				return
			}
			// Admitted: the Job does what was asked, and readiness follows
			// the attempt the controller records.
			c := r.jobFor(claim, spec, JobName(claim.Name, spec.Attempt)).Spec.Template.Spec.Containers[0]
			if src := tt.A[api.AnnotationPrepareFromPVC]; src != "" {
				if c.Image != r.Image || spec.FromPVC != src {
					t.Fatalf("copy Job runs %s from %q, want %s from %q", c.Image, spec.FromPVC, r.Image, src)
				}
			} else {
				want := func(key string) []string {
					v, ok := tt.A[key]
					if !ok {
						return nil
					}
					var l []string
					if err := json.Unmarshal([]byte(v), &l); err != nil {
						t.Fatalf("admitted %s %q: %v", key, v, err)
					}
					return l
				}
				if c.Image != tt.A[api.AnnotationPrepareFromImage] || !reflect.DeepEqual(c.Command, want(api.AnnotationPrepareCommand)) || !reflect.DeepEqual(c.Args, want(api.AnnotationPrepareArgs)) {
					t.Fatalf("Job container %s %q %q does not match %v", c.Image, c.Command, c.Args, tt.A)
				}
			}
			if !pvcspec.NeedsPreparation(claim) {
				t.Fatal("a claim not yet prepared does not hold Pods")
			}
			done := claim.DeepCopy()
			done.Annotations[api.AnnotationPreparePhase] = api.PhaseSucceeded
			done.Annotations[api.AnnotationPrepareObservedAttempt] = attempt
			if !pvcspec.Ready(done) || pvcspec.NeedsPreparation(done) {
				t.Fatalf("attempt %s recorded Succeeded, but the claim is not ready", attempt)
			}
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
		if !asks || err == nil || attempt != tt.want {
			t.Errorf("%v: asks=%t err=%v attempt=%q, want an error and attempt %q", tt.a, asks, err, attempt, tt.want)
		}
	}
}
