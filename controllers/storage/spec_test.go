package storage

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
)

func TestParseSpec(t *testing.T) {
	tests := []struct {
		name    string
		ann     map[string]string
		want    string // Kind, or "" for no preparation
		wantErr string // substring naming the key
	}{
		{"none", nil, "", ""},
		{"image", map[string]string{api.AnnotationPrepareFromImage: "busybox", api.AnnotationPrepareCommand: `["sh"]`, api.AnnotationPrepareArgs: `["-c","true"]`}, FromImage, ""},
		{"pvc", map[string]string{api.AnnotationPrepareFromPVC: "base"}, FromPVC, ""},
		{"both", map[string]string{api.AnnotationPrepareFromImage: "x", api.AnnotationPrepareFromPVC: "y"}, "", "exclusive"},
		{"self", map[string]string{api.AnnotationPrepareFromPVC: "me"}, "", api.AnnotationPrepareFromPVC},
		{"bad command", map[string]string{api.AnnotationPrepareFromImage: "x", api.AnnotationPrepareCommand: `sh -c`}, "", api.AnnotationPrepareCommand},
		{"bad args", map[string]string{api.AnnotationPrepareFromImage: "x", api.AnnotationPrepareArgs: `[1]`}, "", api.AnnotationPrepareArgs},
		{"bad attempt", map[string]string{api.AnnotationPrepareFromImage: "x", api.AnnotationPrepareAttempt: "two"}, "", api.AnnotationPrepareAttempt},
		{"negative attempt", map[string]string{api.AnnotationPrepareFromImage: "x", api.AnnotationPrepareAttempt: "-1"}, "", api.AnnotationPrepareAttempt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "me", Annotations: tt.ann}}
			s, err := ParseSpec(pvc)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to name %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if s != nil {
				got = s.Kind
			}
			if got != tt.want {
				t.Fatalf("kind = %q, want %q", got, tt.want)
			}
		})
	}
}

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

func TestReady(t *testing.T) {
	tests := []struct {
		name string
		ann  map[string]string
		want bool
	}{
		{"no prepare", nil, true},
		{"succeeded", map[string]string{api.AnnotationPrepareFromImage: "x", api.AnnotationPreparePhase: api.PhaseSucceeded, api.AnnotationPrepareObservedAttempt: "0"}, true},
		{"succeeded, attempt bumped", map[string]string{api.AnnotationPrepareFromImage: "x", api.AnnotationPrepareAttempt: "1", api.AnnotationPreparePhase: api.PhaseSucceeded, api.AnnotationPrepareObservedAttempt: "0"}, false},
		{"running", map[string]string{api.AnnotationPrepareFromImage: "x", api.AnnotationPreparePhase: api.PhaseRunning, api.AnnotationPrepareObservedAttempt: "0"}, false},
		{"not started", map[string]string{api.AnnotationPrepareFromPVC: "y"}, false},
	}
	for _, tt := range tests {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "me", Annotations: tt.ann}}
		if got := Ready(pvc); got != tt.want {
			t.Errorf("%s: Ready = %t, want %t", tt.name, got, tt.want)
		}
	}
}
