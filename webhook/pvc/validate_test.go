package pvc

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		a       map[string]string
		wantKey string // "" = valid
		wantMsg string
	}{
		{"no annotations", nil, "", ""},
		{"image", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}, "", ""},
		{"image with command and args", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36",
			api.AnnotationPrepareCommand: `["sh","-c"]`, api.AnnotationPrepareArgs: `["echo hi > /workspace/x"]`}, "", ""},
		{"empty args", map[string]string{api.AnnotationPrepareFromImage: "b", api.AnnotationPrepareArgs: `[]`}, "", ""},
		{"from pvc", map[string]string{api.AnnotationPrepareFromPVC: "base-model"}, "", ""},
		{"attempt", map[string]string{api.AnnotationPrepareFromPVC: "base-model", api.AnnotationPrepareAttempt: "3"}, "", ""},
		{"accessor", map[string]string{api.AnnotationAccessor: "enabled"}, "", ""},
		{"written keys are not validated", map[string]string{api.AnnotationPreparePhase: "whatever"}, "", ""},
		{"both sources", map[string]string{api.AnnotationPrepareFromImage: "b", api.AnnotationPrepareFromPVC: "c"}, api.AnnotationPrepareFromImage, "cannot be combined with " + api.AnnotationPrepareFromPVC},
		{"empty image", map[string]string{api.AnnotationPrepareFromImage: ""}, api.AnnotationPrepareFromImage, "non-empty container image"},
		{"image with space", map[string]string{api.AnnotationPrepareFromImage: "busy box"}, api.AnnotationPrepareFromImage, "without spaces"},
		{"bad source name", map[string]string{api.AnnotationPrepareFromPVC: "Base_Model"}, api.AnnotationPrepareFromPVC, "same namespace"},
		{"source is itself", map[string]string{api.AnnotationPrepareFromPVC: "data"}, api.AnnotationPrepareFromPVC, "names the claim itself"},
		{"command not JSON", map[string]string{api.AnnotationPrepareFromImage: "b", api.AnnotationPrepareCommand: "sh -c x"}, api.AnnotationPrepareCommand, "JSON array of strings"},
		{"command object", map[string]string{api.AnnotationPrepareFromImage: "b", api.AnnotationPrepareCommand: `{"a":1}`}, api.AnnotationPrepareCommand, "JSON array of strings"},
		{"command null", map[string]string{api.AnnotationPrepareFromImage: "b", api.AnnotationPrepareCommand: `null`}, api.AnnotationPrepareCommand, "null is not an array"},
		{"command number element", map[string]string{api.AnnotationPrepareFromImage: "b", api.AnnotationPrepareCommand: `["sh", 1]`}, api.AnnotationPrepareCommand, "element 1 is 1"},
		{"command empty", map[string]string{api.AnnotationPrepareFromImage: "b", api.AnnotationPrepareCommand: `[]`}, api.AnnotationPrepareCommand, "empty command"},
		{"args null element", map[string]string{api.AnnotationPrepareFromImage: "b", api.AnnotationPrepareArgs: `[null]`}, api.AnnotationPrepareArgs, "element 0 is null"},
		{"command without image", map[string]string{api.AnnotationPrepareFromPVC: "c", api.AnnotationPrepareCommand: `["sh"]`}, api.AnnotationPrepareCommand, "only applies with " + api.AnnotationPrepareFromImage},
		{"negative attempt", map[string]string{api.AnnotationPrepareAttempt: "-1"}, api.AnnotationPrepareAttempt, "non-negative integer"},
		{"plus attempt", map[string]string{api.AnnotationPrepareAttempt: "+1"}, api.AnnotationPrepareAttempt, "non-negative integer"},
		{"huge attempt", map[string]string{api.AnnotationPrepareAttempt: "99999999999"}, api.AnnotationPrepareAttempt, "below 2147483648"},
		{"accessor true", map[string]string{api.AnnotationAccessor: "true"}, api.AnnotationAccessor, `the only allowed value is "enabled"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate("data", tt.a)
			if tt.wantKey == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var inv *InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("want *InvalidError for %s, got %v", tt.wantKey, err)
			}
			if inv.Key != tt.wantKey || !strings.Contains(err.Error(), tt.wantMsg) || !strings.HasPrefix(err.Error(), "annotation "+tt.wantKey+": ") {
				t.Fatalf("got %q, want key %s and %q", err, tt.wantKey, tt.wantMsg)
			}
		})
	}
}

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
}

// FuzzValidate: any annotation values are either accepted or refused with
// an error naming a configurable key; never a panic. The seed corpus runs
// with go test.
func FuzzValidate(f *testing.F) {
	f.Add("busybox:1.36", "", `["sh","-c","true"]`, `[]`, "3", "enabled", uint8(0b111101))
	f.Add("b", "c", "", "", "", "", uint8(0b000011))
	f.Add("", "", `[1]`, `null`, "-1", "yes", uint8(0b111100))
	f.Fuzz(func(t *testing.T, image, source, command, args, attempt, accessor string, mask uint8) {
		a := map[string]string{}
		for i, kv := range [][2]string{{api.AnnotationPrepareFromImage, image}, {api.AnnotationPrepareFromPVC, source},
			{api.AnnotationPrepareCommand, command}, {api.AnnotationPrepareArgs, args},
			{api.AnnotationPrepareAttempt, attempt}, {api.AnnotationAccessor, accessor}} {
			if mask&(1<<i) != 0 {
				a[kv[0]] = kv[1]
			}
		}
		err := Validate("data", a)
		if err == nil {
			if _, ok := a[api.AnnotationPrepareCommand]; ok {
				if _, err := StringArray(a[api.AnnotationPrepareCommand]); err != nil {
					t.Fatalf("accepted command %q that is not a string array", command)
				}
			}
			return
		}
		var inv *InvalidError
		if !errors.As(err, &inv) || !strings.HasPrefix(inv.Key, api.Prefix) {
			t.Fatalf("error does not name a key: %v", err)
		}
	})
}
