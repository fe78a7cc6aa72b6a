package extender

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/extender/ledger"
)

func testExtender(t testing.TB, leader bool) *Extender {
	t.Helper()
	c, err := catalog.Parse(map[string]string{
		"g1":   "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\n",
		"greq": "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\nstock: Required\n",
	})
	if err != nil {
		t.Fatal(err)
	}
	l := ledger.New(ledger.Options{})
	// The fake client only absorbs the claim-intent patches filter starts.
	e := &Extender{ledger: l, catalog: catalog.NewStaticStore(c), metrics: newMetrics(l), client: fake.NewClientset(),
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	e.leader.Store(leader)
	return e
}

func node(name string, gpus int64) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("128"), corev1.ResourceMemory: resource.MustParse("1Ti"),
		corev1.ResourcePods: resource.MustParse("110"), api.DefaultGPUResource: *resource.NewQuantity(gpus, resource.DecimalSI),
	}}}
}

func pod(name, labelKey, spec, nodeName string) *corev1.Pod {
	res := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		api.DefaultGPUResource: resource.MustParse("1"),
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID(name), Labels: map[string]string{labelKey: spec}},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func call(t testing.TB, h http.HandlerFunc, method, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest(method, "/", strings.NewReader(body)))
	return rec
}

func TestBadInput(t *testing.T) {
	e := testExtender(t, true)
	tests := []struct {
		name    string
		handler http.HandlerFunc
		method  string
		body    string
		code    int
		errPart string
	}{
		{"filter not JSON", e.handleFilter, http.MethodPost, "{", 400, "decoding request body"},
		{"filter without Pod", e.handleFilter, http.MethodPost, `{"NodeNames":["a"]}`, 400, "field Pod: required"},
		{"prioritize without Pod", e.handlePrioritize, http.MethodPost, `{}`, 400, "field Pod: required"},
		{"bind without node", e.handleBind, http.MethodPost, `{"PodName":"x","PodNamespace":"ns"}`, 400, "Node are required"},
		{"GET filter", e.handleFilter, http.MethodGet, "", 405, "use POST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := call(t, tt.handler, tt.method, tt.body)
			var out map[string]string
			if rec.Code != tt.code || json.Unmarshal(rec.Body.Bytes(), &out) != nil || !strings.Contains(out["error"], tt.errPart) {
				t.Fatalf("got %d %s, want %d with JSON error containing %q", rec.Code, rec.Body, tt.code, tt.errPart)
			}
		})
	}
}

func filterBody(t testing.TB, p *corev1.Pod, nodes ...string) string {
	b, err := json.Marshal(extenderv1.ExtenderArgs{Pod: p, NodeNames: &nodes})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFilterHandler(t *testing.T) {
	tests := []struct {
		name     string
		leader   bool
		pod      *corev1.Pod
		feasible []string
		failed   map[string]string // node -> substring
	}{
		{"unknown spec names the label and the known specs", true, pod("x", api.LabelGPUSpec, "g9", ""), nil,
			map[string]string{"warm": `label runplane.io/gpu-spec: unknown GPU spec "g9"; known specs: g1, greq`, "cold": "known specs"}},
		{"Preferred fits warm and cold", true, pod("x", api.LabelGPUSpec, "g1", ""), []string{"cold", "warm"}, nil},
		{"Required fits only the warm node", true, pod("x", api.LabelGPUSpec, "greq", ""), []string{"warm"},
			map[string]string{"cold": "has stock: Required"}},
		{"a placeholder takes free capacity only", false, pod("x", api.LabelStock, "g1", ""), []string{"cold"},
			map[string]string{"warm": "insufficient nvidia.com/gpu"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := testExtender(t, tt.leader)
			e.ledger.UpsertNode(node("warm", 2))
			e.ledger.UpsertNode(node("cold", 1))
			e.ledger.UpsertPod(pod("ph-g1", api.LabelStock, "g1", "warm"))
			e.ledger.UpsertPod(pod("ph-greq", api.LabelStock, "greq", "warm"))
			rec := call(t, e.handleFilter, http.MethodPost, filterBody(t, tt.pod, "cold", "warm"))
			var out extenderv1.ExtenderFilterResult
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != 200 {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			if fmt.Sprint(*out.NodeNames) != fmt.Sprint(tt.feasible) && !(len(*out.NodeNames) == 0 && tt.feasible == nil) {
				t.Errorf("feasible %v, want %v", *out.NodeNames, tt.feasible)
			}
			for n, part := range tt.failed {
				if !strings.Contains(out.FailedAndUnresolvableNodes[n], part) {
					t.Errorf("node %s: %q, want %q", n, out.FailedAndUnresolvableNodes[n], part)
				}
			}
		})
	}
}

func TestBindNotLeader(t *testing.T) {
	e := testExtender(t, false)
	rec := call(t, e.handleBind, http.MethodPost, `{"PodName":"x","PodNamespace":"ns","PodUID":"x","Node":"a"}`)
	var out extenderv1.ExtenderBindingResult
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || !strings.Contains(out.Error, "not the leader") {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	m := &bytes.Buffer{}
	mfs, _ := e.metrics.registry.Gather()
	for _, mf := range mfs {
		fmt.Fprintln(m, mf.String())
	}
	if !strings.Contains(m.String(), "not_leader") {
		t.Fatalf("no not_leader bind failure in metrics:\n%s", m)
	}
}

func TestPrioritizeHandler(t *testing.T) {
	e := testExtender(t, true)
	e.ledger.UpsertNode(node("warm", 2))
	e.ledger.UpsertNode(node("cold", 2))
	e.ledger.UpsertPod(pod("ph", api.LabelStock, "g1", "warm"))
	rec := call(t, e.handlePrioritize, http.MethodPost, filterBody(t, pod("x", api.LabelGPUSpec, "g1", ""), "cold", "warm"))
	var out extenderv1.HostPriorityList
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[1].Host != "warm" || out[1].Score != 10 || out[0].Score >= 10 {
		t.Fatalf("priorities %+v, want warm 10 and cold lower", out)
	}
}

func TestParseNames(t *testing.T) {
	tests := []struct {
		raw     string
		want    []string
		wantErr bool
	}{
		{`[]`, []string{}, false},
		{` [ "a" , "b.c-1" ] `, []string{"a", "b.c-1"}, false},
		{`["a\u002db"]`, []string{"a-b"}, false},
		{`["a",]`, nil, true},
		{`{"a":1}`, nil, true},
		{`["a"`, nil, true},
		{`["a`, nil, true},
	}
	for _, tt := range tests {
		got, err := parseNames([]byte(tt.raw), ledger.New(ledger.Options{}).Intern)
		if (err != nil) != tt.wantErr || (!tt.wantErr && fmt.Sprint(got) != fmt.Sprint(tt.want)) {
			t.Errorf("parseNames(%s) = %q, %v; want %q, error %v", tt.raw, got, err, tt.want, tt.wantErr)
		}
	}
}

// The hand-written encoders must agree with encoding/json.
func TestWriteResultsRoundTrip(t *testing.T) {
	feasible := []string{"a", "b.example-1", "we\"ird"}
	failed := extenderv1.FailedNodesMap{"c": `spec "x": no`, "d": "insufficient cpu"}
	rec := httptest.NewRecorder()
	writeFilterResult(rec, feasible, failed)
	var got extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, rec.Body)
	}
	if fmt.Sprint(*got.NodeNames) != fmt.Sprint(feasible) || fmt.Sprint(got.FailedAndUnresolvableNodes) != fmt.Sprint(failed) {
		t.Fatalf("round trip: %+v", got)
	}
	list := extenderv1.HostPriorityList{{Host: "a", Score: 10}, {Host: "b\\c", Score: 0}}
	rec = httptest.NewRecorder()
	writePriorities(rec, list)
	var gotList extenderv1.HostPriorityList
	if err := json.Unmarshal(rec.Body.Bytes(), &gotList); err != nil || fmt.Sprint(gotList) != fmt.Sprint(list) {
		t.Fatalf("priorities round trip: %v %+v", err, gotList)
	}
}

func TestSplitNodeNames(t *testing.T) {
	tests := []struct {
		name, body, head, names string
		ok                      bool
	}{
		{"scheduler shape", `{"Pod":{"metadata":{"name":"x"}},"Nodes":null,"NodeNames":["a","b"]}`,
			`{"Pod":{"metadata":{"name":"x"}},"Nodes":null}`, `["a","b"]`, true},
		{"key inside an annotation value is not the last", `{"Pod":{"metadata":{"annotations":{"NodeNames":"[\\"z\\"]"}}},"NodeNames":["a"]}`,
			`{"Pod":{"metadata":{"annotations":{"NodeNames":"[\\"z\\"]"}}}}`, `["a"]`, true},
		{"no NodeNames", `{"Pod":{}}`, "", "", false},
		{"NodeNames not last", `{"NodeNames":["a"],"Pod":{}}`, "", "", false},
		{"NodeNames first and only", `{"NodeNames":["a"]}`, "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			head, names, ok := splitNodeNames([]byte(tt.body))
			if ok != tt.ok || (ok && (string(head) != tt.head || string(names) != tt.names)) {
				t.Fatalf("got %q %q %v, want %q %q %v", head, names, ok, tt.head, tt.names, tt.ok)
			}
		})
	}
}

// A Pod whose annotation value mimics the key must not confuse the fast path.
func TestFilterTrickyAnnotation(t *testing.T) {
	e := testExtender(t, true)
	e.ledger.UpsertNode(node("real", 1))
	p := pod("x", api.LabelGPUSpec, "g1", "")
	p.Annotations = map[string]string{"NodeNames": `["fake"]}`}
	rec := call(t, e.handleFilter, http.MethodPost, filterBody(t, p, "real"))
	var out extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || fmt.Sprint(*out.NodeNames) != "[real]" {
		t.Fatalf("%v %s", err, rec.Body)
	}
}
