package extender

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// FuzzDecodeArgs: decodeArgs equals json.Unmarshal into the v1 type on
// every input, result and error. `go test` runs the seeds; `go test -fuzz
// FuzzDecodeArgs ./extender` searches further.
func FuzzDecodeArgs(f *testing.F) {
	for _, seed := range []string{
		`{"Pod":{"metadata":{"name":"x"}},"Nodes":null,"NodeNames":["a","b"]}`,
		`{"Pod":{"metadata":{"annotations":{"NodeNames":"[\"z\"]}"}}},"NodeNames":["a"]}`,
		` { "nodenames" : [ "a" , "b.c-1" ] , "POD" : {} } `,
		`{"Pod":{},"NodeNames":["a\u002db","we\"ird"]}`,
		`{"Pod":{},"NodeNames":[]}`,
		`{"X":"a\\\"b\\","Pod":{"metadata":{"name":"q\\\\"}},"NodeNames":[ "a" ,"", "b" ] }`,
		`{"NodeNames":["a","b\\"]}`,
		`{"NodeNames":["a","b"`,
		`{"NodeNames":["a"}`,
		`{"Pod":{},"NodeNames":null}`,
		`{"Pod":null}`,
		`{"X":[1,{"y":"}"}],"Pod":{}}`,
		`{"X":[1,,2],"Pod":{}}`,
		`{"Pod":{"metadata":{"name":"a"}},"pod":{"metadata":{"namespace":"b"}}}`,
		`{"P\u006fd":{}}`,
		`{"NodeNameſ":["a"]}`,
		`{"Pod":{}} x`,
		`{"Pod":{"a":"b}`,
		`{"NodeNames":["a",]}`,
		`{"NodeNames":"a"}`,
		`{"NodeNames":[1]}`,
		`{"Pod":5,"NodeNames":["a"]}`,
		`{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"n"}}]}}`,
		`["Pod"]`,
		`{}`,
		`null`,
		``,
		// Too deep for encoding/json only when counted from the body.
		`{"X":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `,"Pod":{},"NodeNames":["a"]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var want, got extenderv1.ExtenderArgs
		wantErr := json.Unmarshal(body, &want)
		gotErr := decodeArgs(body, &got)
		if wantErr != nil {
			require.EqualError(t, gotErr, wantErr.Error())
		} else {
			require.NoError(t, gotErr)
		}
		require.Equal(t, want, got)
		// As a filter reads it (names unsplit, of the Pod only what it
		// acts on), through a reused reader: whatever encoding/json
		// accepts is accepted and reads the same.
		r := argsReader{names: []string{"stale"}, nameBytes: [][]byte{[]byte("stale")}}
		var lazy extenderv1.ExtenderArgs
		lazyErr := r.decode(body, &lazy, decodeMode{lazyNames: true, podMeta: true})
		if wantErr != nil {
			return
		}
		require.NoError(t, lazyErr)
		if want.Pod != nil {
			identity := func(p *corev1.Pod) []any { return []any{p.Name, p.Namespace, p.UID, p.Labels} }
			require.Equal(t, identity(want.Pod), identity(lazy.Pod))
		}
		lazy.Pod = want.Pod
		if r.raw != nil {
			require.Nil(t, lazy.NodeNames)
			var asBytes []string
			for _, n := range r.bytesOfNames() {
				asBytes = append(asBytes, string(n))
			}
			r.splitNames(&lazy)
			require.Equal(t, *lazy.NodeNames, append([]string{}, asBytes...))
		}
		require.Equal(t, want, lazy)
	})
}

// TestSchedulerBodyTakesFastPath: what kube-scheduler sends (json.Marshal
// of the v1 type, with a real Pod and thousands of names) is decoded by the
// fast path, not by the encoding/json fallback that would hide a broken
// splitter from FuzzDecodeArgs.
func TestSchedulerBodyTakesFastPath(t *testing.T) {
	names := make([]string, 5000)
	for i := range names {
		names[i] = fmt.Sprintf("gpu-node-%04d.zone-a", i)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: "team-a", Labels: map[string]string{"runplane.io/gpu-spec": "g1.8"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "pytorch",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}}}},
	}
	for _, tc := range []struct {
		name string
		args extenderv1.ExtenderArgs
	}{
		{name: "node names", args: extenderv1.ExtenderArgs{Pod: pod, NodeNames: &names}},
		{name: "no nodes", args: extenderv1.ExtenderArgs{Pod: pod, NodeNames: &[]string{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := json.Marshal(tc.args)
			require.NoError(t, err)
			var got extenderv1.ExtenderArgs
			var r argsReader
			require.True(t, r.fast(body, &got, decodeMode{}), "the scheduler's body takes the fast path")
			require.Equal(t, tc.args, got)
			require.NotNil(t, r.raw, "the names are a plain array")
			// As a filter reads it: the Pod's metadata only, the names
			// not split.
			var deferred extenderv1.ExtenderArgs
			require.True(t, r.fast(body, &deferred, decodeMode{lazyNames: true, podMeta: true}))
			require.Same(t, &r.meta, deferred.Pod)
			require.Equal(t, "trainer", deferred.Pod.Name)
			require.Nil(t, deferred.NodeNames)
		})
	}
}

// FuzzEncode: the append functions encode the v1 types to JSON that reads
// back as what json.Marshal's does. The input is split at NUL bytes into
// node names and reasons.
func FuzzEncode(f *testing.F) {
	for _, seed := range []string{"a\x00b\x00c\x00d", "we\"ird\x00b\\c\x00<&>\x00\xff\xfe", "", "\x00", "ünï\x00\u2028"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		parts := strings.Split(in, "\x00")
		feasible := []string{}
		failed := extenderv1.FailedNodesMap{}
		var list extenderv1.HostPriorityList
		var scores []int64
		for i, p := range parts {
			if i%2 == 0 {
				feasible = append(feasible, p)
			} else {
				failed[p] = parts[i-1]
			}
			list = append(list, extenderv1.HostPriority{Host: p, Score: int64(len(p) - 3)})
			scores = append(scores, int64(len(p)-3))
		}
		results := []extenderv1.ExtenderFilterResult{
			{NodeNames: &feasible, FailedAndUnresolvableNodes: failed, Error: in},
			{FailedNodes: failed},
		}
		for i := range results {
			// Names known to be plain may skip the check only when they are.
			for _, known := range []bool{false, allPlain(feasible)} {
				sameJSON[extenderv1.ExtenderFilterResult](t, appendFilterResult(nil, &results[i], known), &results[i])
			}
		}
		for _, known := range []bool{false, allPlain(parts)} {
			sameJSON[extenderv1.HostPriorityList](t, appendPriorities(nil, parts, scores, known), list)
			// No scores: 0 for every host.
			sameJSON[extenderv1.HostPriorityList](t, appendPriorities(nil, parts, nil, known), priorities(parts, nil))
			sameJSON[extenderv1.HostPriorityList](t, appendPriorities(nil, nil, nil, known), extenderv1.HostPriorityList{})
		}
	})
}

// TestFailedKeysThatEncodeAlike: invalid UTF-8 keys all encode as
// "\ufffd"; the last one written wins when the answer is read, so a map
// of them must be written in encoding/json's order (FuzzEncode found it).
func TestFailedKeysThatEncodeAlike(t *testing.T) {
	m := extenderv1.FailedNodesMap{}
	for i := range 8 {
		m[string([]byte{0x80 + byte(i)})] = fmt.Sprint("reason ", i)
	}
	m["plain"] = "fits nowhere"
	for range 20 { // map order differs from run to run
		sameJSON[extenderv1.FailedNodesMap](t, appendFailed(nil, m), m)
	}
}

// sameJSON requires that got decodes into a T exactly as json.Marshal(v) does.
func sameJSON[T any](t *testing.T, got []byte, v any) {
	t.Helper()
	want, err := json.Marshal(v)
	require.NoError(t, err)
	var fromGot, fromWant T
	require.NoError(t, json.Unmarshal(got, &fromGot), "%s", got)
	require.NoError(t, json.Unmarshal(want, &fromWant))
	require.Equal(t, fromWant, fromGot)
}

func allPlain(list []string) bool {
	for _, s := range list {
		if !plain(s) {
			return false
		}
	}
	return true
}
