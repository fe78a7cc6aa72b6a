//go:build linux

package extender

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sort"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/runplane/runplane/api"
)

// BenchmarkFilterPrioritize measures one scheduling cycle's extender work —
// a filter and, when it answered more than one node, a prioritize, through
// the HTTP handlers, JSON included — at 5,000 nodes holding 50,000 Pods (10
// per node, 2 of them placeholders). The extender is the leader, so a
// filter that fits the Pod answers the node it reserved alone, and
// kube-scheduler then takes that node without a prioritize
// (schedule_one.go: "When only one node after predicate, just use it");
// prioritized/op says how many cycles had one.
// It reports p50 and p99 per cycle of wall time and of the thread's CPU
// time (on a shared, overloaded machine wall time mostly measures the wait
// for a core); the goal is p99 <= 2ms.
func BenchmarkFilterPrioritize(b *testing.B) {
	e, pods, bodies, patches := benchCluster(b, true, 0, false)
	// The baseline is plain encoding/json on the same v1 types around the
	// same filter and prioritize: what codec.go must beat to exist.
	plain := func(verb func(*extenderv1.ExtenderArgs) any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var args extenderv1.ExtenderArgs
			if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			_ = json.NewEncoder(w).Encode(verb(&args))
		}
	}
	for _, path := range []struct {
		name               string
		filter, prioritize http.HandlerFunc
	}{
		{"baseline", plain(func(a *extenderv1.ExtenderArgs) any { return e.filter(a) }),
			plain(func(a *extenderv1.ExtenderArgs) any { return e.prioritize(a) })},
		{"codec", e.handleFilter, e.handlePrioritize},
	} {
		b.Run(path.name, func(b *testing.B) {
			before := patches.Load()
			cycles(b, pods, bodies, path.filter, path.prioritize)
			b.ReportMetric(float64(patches.Load()-before)/float64(b.N), "claims/op")
		})
	}
}

// BenchmarkFilterPrioritizeShapes is BenchmarkFilterPrioritize's cycle in
// its heavier shapes: "full-cluster", 9 of every 10 nodes full (10 GPUs of
// 10, no placeholder), so a filter answers 4,500 failed nodes with their
// reasons; "follower", a replica that is not the leader, which reserves
// nothing, answers every feasible node and is asked to prioritize them;
// "takeover", every node full but for its 2 placeholders (10 GPUs of 10),
// so each filter reserves a placeholder and starts its claim annotation
// (in the others the warm nodes' free room comes first: claims/op 0).
func BenchmarkFilterPrioritizeShapes(b *testing.B) {
	for _, shape := range []struct {
		name     string
		leader   bool
		fullOf10 int
		takeover bool
	}{{"full-cluster", true, 9, false}, {"follower", false, 0, false}, {"takeover", true, 0, true}} {
		b.Run(shape.name, func(b *testing.B) {
			e, pods, bodies, patches := benchCluster(b, shape.leader, shape.fullOf10, shape.takeover)
			cycles(b, pods, bodies, e.handleFilter, e.handlePrioritize)
			b.ReportMetric(float64(patches.Load())/float64(b.N), "claims/op")
		})
	}
}

// benchCluster is an extender (the leader or not) whose ledger holds 5,000
// nodes and 50,000 Pods: on fullOf10 of every 10 nodes, 10 GPU Pods fill
// its 10 GPUs; on the others 2 placeholders and 8 GPU Pods leave 6 of 16
// GPUs free (with takeover, none: 10 GPUs). bodies are filter requests of
// 64 incoming GPU Pods on every node.
func benchCluster(b *testing.B, leader bool, fullOf10 int, takeover bool) (e *Extender, pods []*corev1.Pod, bodies [][]byte, patches *atomic.Int64) {
	const nodes, podsPerNode = 5000, 10
	pods = make([]*corev1.Pod, 64)
	for i := range pods {
		pods[i] = pod(fmt.Sprintf("incoming-%d", i), api.LabelGPUSpec, "g1", "")
	}
	e = testExtender(b, leader, pods...)
	// A filter that reserves a placeholder records the claim on the Pod:
	// a PATCH from a goroutine of its own. In production that is a request
	// to the API server; the fake clientset's field-managed tracker builds
	// a REST mapper for every patch (~250 KB), whose garbage collection
	// would be measured as the extender's. The patches are counted
	// (claims/op) and answered at once: what a claim costs the extender
	// and the API server is in the cluster's BenchmarkBindThroughput.
	patches = &atomic.Int64{}
	e.client.(*fake.Clientset).PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		patches.Add(1)
		return true, &corev1.Pod{}, nil
	})
	names := make([]string, nodes)
	for i := range nodes {
		names[i] = fmt.Sprintf("node-%04d", i)
		full := i%10 < fullOf10
		gpus := int64(16)
		if full || takeover {
			gpus = podsPerNode
		}
		e.ledger.UpsertNode(node(names[i], gpus))
		for j := range podsPerNode {
			key, spec := api.LabelGPUSpec, "g1"
			if j < 2 && !full {
				key = api.LabelStock
			}
			e.ledger.UpsertPod(pod(fmt.Sprintf("p-%d-%d", i, j), key, spec, names[i]))
		}
	}
	bodies = make([][]byte, len(pods))
	for i := range pods {
		bodies[i] = []byte(filterBody(b, pods[i], names...))
	}
	return e, pods, bodies, patches
}

// cycles runs scheduling cycles (filter, then prioritize of the nodes filter
// returned) of the Pods through the handlers.
func cycles(b *testing.B, pods []*corev1.Pod, bodies [][]byte, filter, prioritize http.HandlerFunc) {
	// A server writes the answer to its connection through a small
	// buffer; a recorder growing a new 200 KB buffer for every answer
	// would measure httptest instead. Each verb reuses its own.
	var filterOut, prioritizeOut bytes.Buffer
	call := func(h http.HandlerFunc, out *bytes.Buffer, body []byte) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		out.Reset()
		rec.Body = out
		h(rec, httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
		return rec
	}
	podJSON := make([][]byte, len(pods))
	for i, p := range pods {
		var err error
		if podJSON[i], err = json.Marshal(p); err != nil {
			b.Fatal(err)
		}
	}
	var pbody []byte
	prioritized, answered := 0, 0
	lat := make([]time.Duration, 0, b.N)
	cpu := make([]time.Duration, 0, b.N)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		cpu0, t0 := threadCPU(), time.Now()
		rec := call(filter, &filterOut, bodies[i%len(bodies)])
		wall, used := time.Since(t0), threadCPU()-cpu0
		answered += rec.Body.Len()
		// The scheduler prioritizes the nodes filter returned, if more
		// than one. Building its request is the scheduler's work, in its
		// own process: it is not timed, and it reuses one buffer, so it
		// does not make this process's garbage collector run while the
		// extender is timed.
		b.StopTimer()
		var feasible int
		pbody, feasible = prioritizeBody(b, pbody[:0], podJSON[i%len(pods)], rec.Body.Bytes())
		b.StartTimer()
		if feasible > 1 {
			prioritized++
			cpu0, t0 = threadCPU(), time.Now()
			call(prioritize, &prioritizeOut, pbody)
			wall, used = wall+time.Since(t0), used+threadCPU()-cpu0
		}
		lat, cpu = append(lat, wall), append(cpu, used)
	}
	b.StopTimer()
	report(b, lat, "ms")
	report(b, cpu, "cpu-ms")
	b.ReportMetric(float64(prioritized)/float64(len(lat)), "prioritized/op")
	b.ReportMetric(float64(answered)/float64(len(lat)), "filter-answer-B/op")
}

// prioritizeBody appends to buf the ExtenderArgs kube-scheduler sends to
// prioritize the Pod on the nodes of a filter answer: the answer's
// NodeNames array as it is (encoding/json writes a []string as both
// encoders do). feasible is how many names it holds (node names hold no
// comma).
func prioritizeBody(b *testing.B, buf, pod, filterAnswer []byte) (_ []byte, feasible int) {
	_, names, ok := bytes.Cut(filterAnswer, []byte(`"NodeNames":`))
	if ok {
		names, _, ok = bytes.Cut(names, []byte(`,"FailedNodes":`))
	}
	if !ok {
		b.Fatalf("no NodeNames in the filter answer %.200s", filterAnswer)
	}
	if bytes.IndexByte(names, '"') >= 0 {
		feasible = bytes.Count(names, []byte(",")) + 1
	}
	buf = append(append(buf, `{"Pod":`...), pod...)
	return append(append(append(buf, `,"NodeNames":`...), names...), '}'), feasible
}

func report(b *testing.B, d []time.Duration, unit string) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-"+unit)
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, "p99-"+unit)
}

// threadCPU is the CPU time of the calling OS thread. CLOCK_THREAD_CPUTIME_ID
// is exact; getrusage's figure advances in scheduler ticks (4ms), longer
// than a whole cycle.
func threadCPU() time.Duration {
	const clockThreadCPUTimeID = 3
	var ts syscall.Timespec
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}
