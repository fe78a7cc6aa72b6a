package pvcspec

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
)

// Case is one entry of testdata/cases.json, the shared table of annotation
// sets: these tests use it, and so does the test in controllers/storage that
// checks admission and the controller agree on it. Claims are named "data".
// WantKey is the key a denial names ("" = valid), WantMsg a substring of the
// message, Want the parsed Spec of a valid set.
type Case struct {
	Name    string            `json:"name"`
	A       map[string]string `json:"annotations"`
	WantKey string            `json:"wantKey"`
	WantMsg string            `json:"wantMsg"`
	Want    Spec              `json:"want"`
}

func loadCases(t *testing.T) []Case {
	t.Helper()
	f, err := os.Open("testdata/cases.json")
	require.NoError(t, err)
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields() // a misspelt field would make a case vacuous
	var cases []Case
	require.NoError(t, dec.Decode(&cases), "testdata/cases.json")
	require.GreaterOrEqual(t, len(cases), 30, "testdata/cases.json: the table was lost")
	return cases
}

func TestParse(t *testing.T) {
	for _, tt := range loadCases(t) {
		t.Run(tt.Name, func(t *testing.T) {
			s, err := Parse("data", tt.A)
			if tt.WantKey == "" {
				require.NoError(t, err, "want valid, got")
				require.Equal(t, tt.Want, s)
				return
			}
			var inv *InvalidError
			require.ErrorAs(t, err, &inv)
			require.Equal(t, tt.WantKey, inv.Key)
			require.Contains(t, err.Error(), tt.WantMsg)
			require.True(t, strings.HasPrefix(err.Error(), "annotation "+tt.WantKey+": "), "%q names its key first", err)
			require.Zero(t, s, "invalid input returns the zero Spec")
		})
	}
}

func claim(a map[string]string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Annotations: a}}
}

// with returns a copy of a with the given key/value pairs added.
func with(a map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func TestReadiness(t *testing.T) {
	img := map[string]string{api.AnnotationPrepareFromImage: "x"}
	done := func(a map[string]string, observed string) map[string]string {
		return with(a, api.AnnotationPreparePhase, api.PhaseSucceeded, api.AnnotationPrepareObservedAttempt, observed)
	}
	tests := []struct {
		name        string
		a           map[string]string
		wants       bool // WantsPreparation
		ready       bool
		failed      bool
		failedNames string // substring of Failed's reason
	}{
		{"no prepare", nil, false, true, false, ""},
		{"accessor only", map[string]string{api.AnnotationAccessor: api.AccessorEnabled}, false, true, false, ""},
		{"invalid but no source", map[string]string{api.AnnotationPrepareAttempt: "-1"}, false, true, false, ""},
		{"succeeded", done(img, "0"), true, true, false, ""},
		{"succeeded, explicit attempt 0", done(with(img, api.AnnotationPrepareAttempt, "0"), "0"), true, true, false, ""},
		{"succeeded, attempt bumped", done(with(img, api.AnnotationPrepareAttempt, "1"), "0"), true, false, false, ""},
		{"succeeded attempt 2", done(with(img, api.AnnotationPrepareAttempt, "2"), "2"), true, true, false, ""},
		{"running", with(img, api.AnnotationPreparePhase, api.PhaseRunning, api.AnnotationPrepareObservedAttempt, "0"), true, false, false, ""},
		{"not started", map[string]string{api.AnnotationPrepareFromPVC: "y"}, true, false, false, ""},
		{"failed", with(img, api.AnnotationPreparePhase, api.PhaseFailed, api.AnnotationPrepareObservedAttempt, "0", api.AnnotationPrepareMessage, "exit 1"), true, false, true, "exit 1"},
		{"failed earlier attempt", with(img, api.AnnotationPrepareAttempt, "1", api.AnnotationPreparePhase, api.PhaseFailed, api.AnnotationPrepareObservedAttempt, "0"), true, false, false, ""},
		// Empty is not absent: an empty source asks for preparation and is invalid.
		{"empty image", map[string]string{api.AnnotationPrepareFromImage: ""}, true, false, true, api.AnnotationPrepareFromImage},
		{"empty source", map[string]string{api.AnnotationPrepareFromPVC: ""}, true, false, true, api.AnnotationPrepareFromPVC},
		// Invalid annotations are never ready, whatever the status says.
		{"succeeded but invalid attempt", done(with(img, api.AnnotationPrepareAttempt, " 0"), "0"), true, false, true, api.AnnotationPrepareAttempt},
		{"succeeded but null command", done(with(img, api.AnnotationPrepareCommand, "null"), "0"), true, false, true, api.AnnotationPrepareCommand},
		{"both sources", map[string]string{api.AnnotationPrepareFromImage: "x", api.AnnotationPrepareFromPVC: "y"}, true, false, true, "cannot be combined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pvc := claim(tt.a)
			assert.Equal(t, tt.wants, WantsPreparation(pvc), "WantsPreparation")
			assert.Equal(t, tt.ready, Ready(pvc), "Ready")
			assert.Equal(t, tt.wants && !tt.ready, NeedsPreparation(pvc), "NeedsPreparation")
			failed, why := Failed(pvc)
			assert.Equal(t, tt.failed, failed, "Failed")
			if tt.failed {
				assert.Contains(t, why, tt.failedNames)
			}
		})
	}
}

func TestAttempt(t *testing.T) {
	tests := []struct {
		a       map[string]string
		want    int64
		wantErr bool
	}{
		{nil, 0, false},
		{map[string]string{api.AnnotationPrepareAttempt: "0"}, 0, false},
		{map[string]string{api.AnnotationPrepareAttempt: "007"}, 7, false},
		{map[string]string{api.AnnotationPrepareAttempt: ""}, 0, true},
		{map[string]string{api.AnnotationPrepareAttempt: "1 "}, 0, true},
		{map[string]string{api.AnnotationPrepareAttempt: "2147483648"}, 0, true},
	}
	for _, tt := range tests {
		got, err := Attempt(tt.a)
		assert.Equal(t, tt.wantErr, err != nil, "Attempt(%v) error: %v", tt.a, err)
		assert.Equal(t, tt.want, got, "Attempt(%v)", tt.a)
	}
}

// FuzzParse: any annotation values are either accepted, with a Spec that
// holds what was asked, or refused with an error naming a configurable key;
// never a panic. The seed corpus runs with go test.
func FuzzParse(f *testing.F) {
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
		s, err := Parse("data", a)
		if err != nil {
			var inv *InvalidError
			require.ErrorAs(t, err, &inv)
			require.True(t, strings.HasPrefix(inv.Key, api.Prefix), "error does not name a key: %v", err)
			return
		}
		// Accepted: presence means a usable value, so every reader agrees.
		_, hasImage := a[api.AnnotationPrepareFromImage]
		_, hasSource := a[api.AnnotationPrepareFromPVC]
		require.Equal(t, hasImage || hasSource, s.Prepares(), "accepted %v", a)
		require.Equal(t, WantsPreparation(claim(a)), s.Prepares(), "accepted %v", a)
		if _, ok := a[api.AnnotationPrepareCommand]; ok {
			require.NotEmpty(t, s.Command, "accepted command %q as empty", command)
		}
		if _, ok := a[api.AnnotationPrepareArgs]; ok {
			require.NotNil(t, s.Args, "accepted args %q as null", args)
		}
	})
}
