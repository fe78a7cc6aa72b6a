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
		raw       string
		want      []string
		wantPlain bool
		wantErr   bool
	}{
		{`[]`, []string{}, true, false},
		{` [ "a" , "b.c-1" ] `, []string{"a", "b.c-1"}, true, false},
		{`["a\u002db"]`, []string{"a-b"}, false, false},
		{`["a","we\"ird"]`, []string{"a", `we"ird`}, false, false},
		{`["a",]`, nil, false, true},
		{`{"a":1}`, nil, false, true},
		{`["a"`, nil, false, true},
		{`["a`, nil, false, true},
	}
	for _, tt := range tests {
		got, plain, err := parseNames([]byte(tt.raw), nil)
		var names []string
		for _, n := range got {
			names = append(names, string(n))
		}
		if (err != nil) != tt.wantErr || (!tt.wantErr && (fmt.Sprint(names) != fmt.Sprint(tt.want) || plain != tt.wantPlain)) {
			t.Errorf("parseNames(%s) = %q, plain %v, %v; want %q, plain %v, error %v", tt.raw, names, plain, err, tt.want, tt.wantPlain, tt.wantErr)
		}
	}
}

// The hand-written encoders must agree with encoding/json, for plain names
// and for names that need escaping.
func TestWriteResultsRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		names []string
		plain bool
	}{
		{"plain", []string{"a", "b.example-1", "c", "d"}, true},
		{"escaped", []string{"a", "we\"ird", "c", "b\\c"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var raw [][]byte
			for _, n := range tt.names {
				raw = append(raw, []byte(n))
			}
			reasons := []string{"", "", `spec "x": no`, "insufficient cpu"}
			var got extenderv1.ExtenderFilterResult
			out := appendFilterResult(nil, raw, tt.plain, reasons)
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			wantFailed := extenderv1.FailedNodesMap{tt.names[2]: reasons[2], tt.names[3]: reasons[3]}
			if fmt.Sprint(*got.NodeNames) != fmt.Sprint(tt.names[:2]) || fmt.Sprint(got.FailedAndUnresolvableNodes) != fmt.Sprint(wantFailed) {
				t.Fatalf("round trip: %+v", got)
			}
			scores := []int64{10, 0, 3, 9}
			out = appendPriorities(nil, raw, tt.plain, scores)
			var gotList, want extenderv1.HostPriorityList
			for i, n := range tt.names {
				want = append(want, extenderv1.HostPriority{Host: n, Score: scores[i]})
			}
			if err := json.Unmarshal(out, &gotList); err != nil || fmt.Sprint(gotList) != fmt.Sprint(want) {
				t.Fatalf("priorities round trip: %v %+v", err, gotList)
			}
		})
	}
}

func TestSplitArgs(t *testing.T) {
	tests := []struct {
		name, body, pod, nodes, names string
		ok                            bool
		parsed                        string // %q of the plain names parsed
	}{
		{"scheduler shape", `{"Pod":{"metadata":{"name":"x"}},"Nodes":null,"NodeNames":["a","b"]}`,
			`{"metadata":{"name":"x"}}`, `null`, `["a","b"]`, true, `["a" "b"]`},
		{"escaped names are left to parseNames", `{"Pod":{},"NodeNames":["a\u002db"]}`, `{}`, "", `["a\u002db"]`, true, `[]`},
		{"key inside an annotation value", `{"Pod":{"metadata":{"annotations":{"NodeNames":"[\"z\"]}"}}},"NodeNames":["a"]}`,
			`{"metadata":{"annotations":{"NodeNames":"[\"z\"]}"}}}`, "", `["a"]`, true, `["a"]`},
		{"any order, any case, spaces", ` { "nodenames" : ["a"] , "POD" : {} } `, `{}`, "", `["a"]`, true, `["a"]`},
		{"unknown member skipped", `{"X":["n"],"Pod":{}}`, `{}`, "", "", true, `[]`},
		{"unknown member with brackets in strings", `{"X":[1,{"y":"}"}],"Pod":{}}`, `{}`, "", "", true, `[]`},
		{"empty object", `{}`, "", "", "", true, `[]`},
		{"invalid unknown member", `{"X":[1,,2],"Pod":{}}`, "", "", "", false, ""},
		{"duplicate member", `{"Pod":{},"pod":{}}`, "", "", "", false, ""},
		{"escaped key", `{"P\u006fd":{}}`, "", "", "", false, ""},
		{"trailing garbage", `{"Pod":{}} x`, "", "", "", false, ""},
		{"truncated", `{"Pod":{"a":"b}`, "", "", "", false, ""},
		{"not an object", `["Pod"]`, "", "", "", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod, nodes, names, parsed, ok := splitArgs([]byte(tt.body), nil)
			if ok != tt.ok || (ok && (string(pod) != tt.pod || string(nodes) != tt.nodes || string(names) != tt.names)) {
				t.Fatalf("got %q %q %q %v, want %q %q %q %v", pod, nodes, names, ok, tt.pod, tt.nodes, tt.names, tt.ok)
			}
			if ok && tt.parsed != fmt.Sprintf("%q", parsed) {
				t.Fatalf("parsed names %q, want %s", parsed, tt.parsed)
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

// Bodies that are not the shape kube-scheduler sends (full Node objects,
// members in another order, escaped names) take encoding/json's path and
// must answer exactly like the fast path.
func TestFilterBodyShapes(t *testing.T) {
	p := pod("x", api.LabelGPUSpec, "g1", "")
	podJSON, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, body, want string
	}{
		{"scheduler shape", filterBody(t, p, "warm", "full"),
			`{"NodeNames":["warm"],"FailedAndUnresolvableNodes":{"full":"insufficient nvidia.com/gpu and no unclaimed runplane.io/stock=g1 placeholder"}}`},
		{"names first, escaped", `{"NodeNames":["w\u0061rm","full"],"Pod":` + string(podJSON) + `}`,
			`{"NodeNames":["warm"],"FailedAndUnresolvableNodes":{"full":"insufficient nvidia.com/gpu and no unclaimed runplane.io/stock=g1 placeholder"}}`},
		{"full Node objects", `{"Pod":` + string(podJSON) + `,"Nodes":{"items":[{"metadata":{"name":"warm"}},{"metadata":{"name":"full"}}]}}`,
			`{"Nodes":{"metadata":{},"items":[{"metadata":{"name":"warm"},"spec":{},"status":{"daemonEndpoints":{"kubeletEndpoint":{"Port":0}},"nodeInfo":{"machineID":"","systemUUID":"","bootID":"","kernelVersion":"","osImage":"","containerRuntimeVersion":"","kubeletVersion":"","kubeProxyVersion":"","operatingSystem":"","architecture":""}}}]},"NodeNames":null,"FailedNodes":null,"FailedAndUnresolvableNodes":{"full":"insufficient nvidia.com/gpu and no unclaimed runplane.io/stock=g1 placeholder"},"Error":""}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := testExtender(t, false)
			e.ledger.UpsertNode(node("warm", 1))
			e.ledger.UpsertNode(node("full", 1))
			e.ledger.UpsertPod(pod("busy", api.LabelGPUSpec, "g1", "full"))
			rec := call(t, e.handleFilter, http.MethodPost, tt.body)
			if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != tt.want {
				t.Fatalf("got %d %s\nwant %s", rec.Code, rec.Body, tt.want)
			}
		})
	}
}
