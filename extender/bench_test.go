//go:build linux

package extender

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/runplane/runplane/api"
)

// BenchmarkFilterPrioritize measures one scheduling cycle's extender work —
// a filter and a prioritize call through the HTTP handlers, JSON included —
// at 5,000 nodes holding 50,000 Pods (10 per node, 2 of them placeholders).
// It reports p50 and p99 per cycle of wall time and of the thread's CPU
// time (on a shared, overloaded machine wall time mostly measures the wait
// for a core); the goal is p99 <= 2ms.
func BenchmarkFilterPrioritize(b *testing.B) {
	const nodes, podsPerNode = 5000, 10
	pods := make([]*corev1.Pod, 64)
	for i := range pods {
		pods[i] = pod(fmt.Sprintf("incoming-%d", i), api.LabelGPUSpec, "g1", "")
	}
	e := testExtender(b, true, pods...)
	names := make([]string, nodes)
	for i := range nodes {
		names[i] = fmt.Sprintf("node-%04d", i)
		e.ledger.UpsertNode(node(names[i], 16))
		for j := range podsPerNode {
			key, spec := api.LabelGPUSpec, "g1"
			if j < 2 {
				key = api.LabelStock
			}
			e.ledger.UpsertPod(pod(fmt.Sprintf("p-%d-%d", i, j), key, spec, names[i]))
		}
	}
	bodies := make([]string, len(pods))
	for i := range pods {
		bodies[i] = filterBody(b, pods[i], names...)
	}
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
		b.Run(path.name, func(b *testing.B) { cycles(b, pods, bodies, path.filter, path.prioritize) })
	}
}

// cycles runs scheduling cycles (filter, then prioritize of the nodes filter
// returned) of the Pods through the handlers.
func cycles(b *testing.B, pods []*corev1.Pod, bodies []string, filter, prioritize http.HandlerFunc) {
	call := func(h http.HandlerFunc, body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)))
		if rec.Code != http.StatusOK {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
		return rec
	}
	lat := make([]time.Duration, 0, b.N)
	cpu := make([]time.Duration, 0, b.N)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		cpu0, t0 := threadCPU(), time.Now()
		rec := call(filter, bodies[i%len(bodies)])
		wall, used := time.Since(t0), threadCPU()-cpu0
		// The scheduler prioritizes the nodes filter returned; building
		// its request is the scheduler's work, not timed (nor counted in
		// ns/op and allocs/op).
		b.StopTimer()
		var res extenderv1.ExtenderFilterResult
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
			b.Fatal(err)
		}
		pbody := filterBody(b, pods[i%len(pods)], *res.NodeNames...)
		b.StartTimer()
		cpu0, t0 = threadCPU(), time.Now()
		call(prioritize, pbody)
		lat = append(lat, wall+time.Since(t0))
		cpu = append(cpu, used+threadCPU()-cpu0)
	}
	b.StopTimer()
	report(b, lat, "ms")
	report(b, cpu, "cpu-ms")
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
