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
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/runplane/runplane/api"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/pods")

// review sends one Pod CREATE review through the handler, by a tenant.
func review(t testing.TB, h http.Handler, pod []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	return reviewAs(t, h, pod, tenant)
}

// tenant is the requester of the golden cases unless one names another.
var tenant = authenticationv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}}

// requesterOf reads the requester a golden input names in a comment line
// "# requester: <username> [<group>,...]".
func requesterOf(doc []byte) authenticationv1.UserInfo {
	for _, line := range strings.Split(string(doc), "\n") {
		rest, ok := strings.CutPrefix(line, "# requester: ")
		if !ok {
			continue
		}
		name, groups, _ := strings.Cut(strings.TrimSpace(rest), " ")
		u := authenticationv1.UserInfo{Username: name}
		if groups != "" {
			u.Groups = strings.Split(groups, ",")
		}
		return u
	}
	return tenant
}

// reviewAs sends one Pod CREATE review through the handler by user.
func reviewAs(t testing.TB, h http.Handler, pod []byte, user authenticationv1.UserInfo) *admissionv1.AdmissionResponse {
	t.Helper()
	in := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("0b6a1a5e-0000-4000-8000-000000000001"),
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: testNamespace,
			Operation: admissionv1.Create,
			UserInfo:  user,
			Object:    runtime.RawExtension{Raw: pod},
		},
	}
	body, err := json.Marshal(&in)
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodPost, MutatePodsPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var out admissionv1.AdmissionReview
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	require.NotNil(t, out.Response, rec.Body.String())
	require.Equal(t, in.Request.UID, out.Response.UID, "response for another UID")
	return out.Response
}

func applyPatch(t testing.TB, doc []byte, resp *admissionv1.AdmissionResponse) []byte {
	t.Helper()
	if resp.Patch == nil {
		return doc
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	require.NoError(t, err, "decoding patch")
	out, err := p.Apply(doc)
	require.NoError(t, err, "applying patch")
	return out
}

// podJSON normalises a Pod document through the Go types, as the handler
// sees it.
func podJSON(t testing.TB, doc []byte) []byte {
	t.Helper()
	var pod corev1.Pod
	require.NoError(t, yaml.UnmarshalStrict(doc, &pod))
	b, err := json.Marshal(&pod)
	require.NoError(t, err)
	return b
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./webhook -run TestGolden -update to create it")
	require.Equal(t, string(want), string(got), "%s differs from the golden file (rerun with -update if intended)", path)
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
	require.NoError(t, err)
	require.NotEmpty(t, inputs, "golden inputs")
	h := newHandler(t, nil)
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(in)
			require.NoError(t, err)
			doc := podJSON(t, raw)
			user := requesterOf(raw)
			resp := reviewAs(t, h, doc, user)
			base := strings.TrimSuffix(in, ".in.yaml")
			if strings.HasPrefix(name, "deny-") {
				require.False(t, resp.Allowed, "want a denial, got allowed (patch %s)", resp.Patch)
				require.EqualValues(t, http.StatusForbidden, resp.Result.Code, "a user error, not a webhook failure: %s", resp.Result.Message)
				golden(t, base+".denied.txt", []byte(resp.Result.Message+"\n"))
				return
			}
			require.True(t, resp.Allowed, "denied: %v", resp.Result)
			patch := []byte("[]")
			if resp.Patch != nil {
				patch = canonicalPatch(t, resp.Patch)
			}
			golden(t, base+".patch.json", append(patch, '\n'))
			mutated := applyPatch(t, doc, resp)
			out, err := yaml.JSONToYAML(mutated)
			require.NoError(t, err)
			golden(t, base+".out.yaml", out)

			again := reviewAs(t, h, mutated, user)
			require.True(t, again.Allowed, "reinvocation")
			require.Nil(t, again.Patch, "reinvocation: want an empty patch")

			var pod corev1.Pod
			require.NoError(t, json.Unmarshal(mutated, &pod))
			if _, ok := pod.Annotations[api.AnnotationInjected]; !ok {
				return
			}
			delete(pod.Annotations, api.AnnotationInjected)
			stripped, err := json.Marshal(&pod)
			require.NoError(t, err)
			redo := applyPatch(t, stripped, reviewAs(t, h, stripped, user))
			require.JSONEq(t, string(podJSON(t, mutated)), string(podJSON(t, redo)), "mutating the mutated Pod again changed it")
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
	require.NoError(t, json.Unmarshal(patch, &ops))
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
	require.NoError(t, err)
	return out
}

// TestGoldenPatchesApply applies every golden patch, as a JSON patch library
// other than the one that made it reads it, to its input and compares the
// result with the golden mutated Pod: a regenerated patch must still yield
// the same Pod.
func TestGoldenPatchesApply(t *testing.T) {
	patches, err := filepath.Glob("testdata/pods/*.patch.json")
	require.NoError(t, err)
	require.NotEmpty(t, patches)
	for _, p := range patches {
		base := strings.TrimSuffix(p, ".patch.json")
		t.Run(filepath.Base(base), func(t *testing.T) {
			read := func(path string) []byte {
				b, err := os.ReadFile(path)
				require.NoError(t, err)
				return b
			}
			patch, err := jsonpatch.DecodePatch(read(p))
			require.NoError(t, err)
			got, err := patch.Apply(podJSON(t, read(base+".in.yaml")))
			require.NoError(t, err)
			want, err := yaml.YAMLToJSON(read(base + ".out.yaml"))
			require.NoError(t, err)
			require.JSONEq(t, string(want), string(got))
		})
	}
}
