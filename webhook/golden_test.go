package webhook

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/runplane/runplane/api"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/pods")

// review sends one Pod CREATE review through the handler.
func review(t testing.TB, h http.Handler, pod []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	in := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("0b6a1a5e-0000-4000-8000-000000000001"),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: testNamespace,
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: pod},
		},
	}
	body, err := json.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, MutatePodsPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out.Response == nil || out.Response.UID != in.Request.UID {
		t.Fatalf("response missing or for another UID: %s", rec.Body)
	}
	return out.Response
}

func applyPatch(t testing.TB, doc []byte, resp *admissionv1.AdmissionResponse) []byte {
	t.Helper()
	if resp.Patch == nil {
		return doc
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("decoding patch: %v", err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		t.Fatalf("applying patch: %v", err)
	}
	return out
}

// podJSON normalises a Pod document through the Go types, as the handler
// sees it.
func podJSON(t testing.TB, doc []byte) []byte {
	t.Helper()
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(doc, &pod); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(&pod)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./webhook -run TestGolden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (rerun with -update if intended)\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
}

// TestGolden runs every testdata/pods/<case>.in.yaml through the handler and
// compares the mutated Pod (<case>.out.yaml) and the patch (<case>.patch.json),
// or the denial a kubectl user reads (<case>.denied.txt). Each admitted case
// is then sent again, as the API server's reinvocation would, and must yield
// an empty patch; and, with the runplane.io/injected annotation removed (so
// the whole mutation runs again on its own output), a patch that changes
// nothing but that annotation.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/pods/*.in.yaml")
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no golden inputs: %v", err)
	}
	h := newHandler(t, nil)
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			doc := podJSON(t, raw)
			resp := review(t, h, doc)
			base := strings.TrimSuffix(in, ".in.yaml")
			if strings.HasPrefix(name, "deny-") {
				if resp.Allowed || resp.Result == nil {
					t.Fatalf("want a denial, got allowed (patch %s)", resp.Patch)
				}
				if resp.Result.Code != http.StatusForbidden {
					t.Errorf("denial code %d, want 403 (a user error, not a webhook failure): %s", resp.Result.Code, resp.Result.Message)
				}
				golden(t, base+".denied.txt", []byte(resp.Result.Message+"\n"))
				return
			}
			if !resp.Allowed {
				t.Fatalf("denied: %v", resp.Result)
			}
			patch := []byte("[]")
			if resp.Patch != nil {
				patch = canonicalPatch(t, resp.Patch)
			}
			golden(t, base+".patch.json", append(patch, '\n'))
			mutated := applyPatch(t, doc, resp)
			out, err := yaml.JSONToYAML(mutated)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, base+".out.yaml", out)

			again := review(t, h, mutated)
			if !again.Allowed || again.Patch != nil {
				t.Errorf("reinvocation: want allowed with an empty patch, got allowed=%v patch %s", again.Allowed, again.Patch)
			}

			var pod corev1.Pod
			if err := json.Unmarshal(mutated, &pod); err != nil {
				t.Fatal(err)
			}
			if _, ok := pod.Annotations[api.AnnotationInjected]; !ok {
				return
			}
			delete(pod.Annotations, api.AnnotationInjected)
			stripped, err := json.Marshal(&pod)
			if err != nil {
				t.Fatal(err)
			}
			redo := applyPatch(t, stripped, review(t, h, stripped))
			if !bytes.Equal(podJSON(t, redo), podJSON(t, mutated)) {
				t.Errorf("mutating the mutated Pod again changed it:\n%s\nwant\n%s", redo, mutated)
			}
		})
	}
}

// canonicalPatch orders a patch's operations by path (numeric segments by
// number) for a stable golden file: the patch is built by diffing maps, so
// its order varies between runs. Only the golden copy is reordered; the
// tests apply the patch as the handler sent it.
func canonicalPatch(t testing.TB, patch []byte) []byte {
	t.Helper()
	var ops []map[string]any
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatal(err)
	}
	key := func(op map[string]any) []string { s, _ := op["path"].(string); return strings.Split(s, "/") }
	sort.SliceStable(ops, func(i, j int) bool {
		a, b := key(ops[i]), key(ops[j])
		for k := 0; k < len(a) && k < len(b); k++ {
			if a[k] == b[k] {
				continue
			}
			na, ea := strconv.Atoi(a[k])
			nb, eb := strconv.Atoi(b[k])
			if ea == nil && eb == nil {
				return na < nb
			}
			return a[k] < b[k]
		}
		return len(a) < len(b)
	})
	out, err := json.MarshalIndent(ops, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return out
}
