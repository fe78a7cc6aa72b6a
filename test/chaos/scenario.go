package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/queue/config"
	"github.com/runplane/runplane/test/chaos/execlog"
)

// Scenario is one case run without Kubernetes: a nats-server, one queue
// (-no-kube, one static pool), Workers workers, the load, and Fault run
// alongside the load.
type Scenario struct {
	Name         string
	Workers      int
	Concurrency  int
	FrameworkEnv []string
	SidecarArgs  []string
	QueueConfig  func(*config.QueueConfiguration)
	NATS         NATSOptions
	// NATSServers > 1 runs a JetStream cluster of that many servers with
	// every stream and bucket at that many replicas, and two queue
	// replicas on different servers: "queue" (ingress and activator) on
	// n0 and "ingress" (-no-activator) on n1; the load alternates between
	// them and the workers between the servers.
	NATSServers int
	Rate        float64
	Duration    time.Duration
	// TimeoutSeconds is each invocation's timeoutSeconds (0: none).
	TimeoutSeconds int
	// Fault runs while the load runs; its error fails the case.
	Fault func(ctx context.Context, s *Stack) error
	// Quiet and Within bound the wait for every accepted invocation to end
	// (defaults 30s without change, 3m in all).
	Quiet, Within time.Duration
}

// Stack is what a running scenario is made of.
type Stack struct {
	Bins Binaries
	Dir  string
	NATS *NATS
	// NATSCluster are all servers (NATS is the first).
	NATSCluster []*NATS
	Queue       *Queue
	// Ingress is the second queue replica of a cluster scenario (nil
	// otherwise).
	Ingress *Queue
	Workers []*Worker
	ExecLog string
	// Namespace and Pool of the one pool.
	Namespace, Pool string

	scenario Scenario
	rss      atomic.Int64
}

// Outcome is a finished scenario.
type Outcome struct {
	Load   LoadResult
	Counts Counts
	// MaxRSS is the queue's largest resident set seen (bytes).
	MaxRSS int64
	Row    Row
}

// Run runs sc against bins and returns its counts; it fails t only when
// the harness itself breaks (a process that will not start), never on the
// counts, which the caller judges.
func (sc Scenario) Run(t testing.TB, bins Binaries) Outcome {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := sc.Start(t, bins)
	go s.sampleRSS(ctx)
	urls := []string{s.Queue.URL}
	if s.Ingress != nil {
		urls = append(urls, s.Ingress.URL)
	}
	load := Load{URLs: urls, Namespace: s.Namespace, Pool: s.Pool, Rate: sc.Rate, Duration: sc.Duration,
		IDPrefix: "inv-", TimeoutSeconds: sc.TimeoutSeconds}
	var faultErr error
	var wg sync.WaitGroup
	if sc.Fault != nil {
		wg.Go(func() { faultErr = sc.Fault(ctx, s) })
	}
	res := load.Run(ctx)
	wg.Wait()
	require.NoError(t, faultErr, "fault of case %s", sc.Name)
	t.Logf("%s: load: %s", sc.Name, res)
	out := s.Finish(t, res)
	out.Row = NewRow(sc.Name, sc.Rate, sc.Duration.String(), out.Counts, out.MaxRSS, Note(res, out.Counts))
	return out
}

// Start brings up the stack of sc; t's cleanup stops it.
func (sc Scenario) Start(t testing.TB, bins Binaries) *Stack {
	t.Helper()
	dir := CaseDir(t, sc.Name)
	s := &Stack{Bins: bins, Dir: dir, ExecLog: filepath.Join(dir, "exec.log"), Namespace: "chaos", Pool: "p", scenario: sc}
	var err error
	s.NATSCluster, err = StartNATSCluster(bins, dir, max(sc.NATSServers, 1), sc.NATS)
	require.NoError(t, err)
	for _, n := range s.NATSCluster {
		t.Cleanup(n.Kill)
	}
	s.NATS = s.NATSCluster[0]
	qo := QueueOptions{Pools: []string{s.Namespace + "/" + s.Pool}}
	if sc.NATSServers > 1 {
		qo.Configure = append(qo.Configure, func(c *config.QueueConfiguration) { c.Stream.Replicas, c.NATS.Servers = sc.NATSServers, sc.NATSServers })
	}
	if sc.QueueConfig != nil {
		qo.Configure = append(qo.Configure, sc.QueueConfig)
	}
	s.Queue, err = StartQueue(bins, dir, "queue", s.NATS.URL, qo)
	require.NoError(t, err)
	t.Cleanup(s.Queue.Kill)
	if sc.NATSServers > 1 {
		ingress := qo
		ingress.Configure = append(append([]func(*config.QueueConfiguration){}, qo.Configure...), func(c *config.QueueConfiguration) { c.DisableActivator = true })
		s.Ingress, err = StartQueue(bins, dir, "ingress", s.NATSCluster[1].URL, ingress)
		require.NoError(t, err)
		t.Cleanup(s.Ingress.Kill)
	}
	for i := range sc.Workers {
		_, err := s.AddWorker(t, "w"+strconv.Itoa(i))
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, w := range s.Workers {
			w.Kill()
		}
	})
	require.NoError(t, s.WaitReady(context.Background(), sc.Workers, 30*time.Second), "workers not ready (logs in %s)", dir)
	return s
}

// AddWorker starts one more worker of the pool.
func (s *Stack) AddWorker(t testing.TB, name string) (*Worker, error) {
	// Spread over the servers (each client learns the others from the
	// server it reaches and fails over to them).
	url := s.NATSCluster[len(s.Workers)%len(s.NATSCluster)].URL
	w, err := StartWorker(s.Bins, s.Dir, name, url, WorkerOptions{Namespace: s.Namespace, Pool: s.Pool,
		Concurrency: s.scenario.Concurrency, ExecLog: s.ExecLog, FrameworkEnv: s.scenario.FrameworkEnv, SidecarArgs: s.scenario.SidecarArgs})
	if err != nil {
		return nil, err
	}
	s.Workers = append(s.Workers, w)
	return w, nil
}

// WaitReady waits until the queue reports n ready workers in the pool.
func (s *Stack) WaitReady(ctx context.Context, n int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if st, err := PoolStatus(ctx, s.Queue.URL, s.Namespace, s.Pool); err == nil && st.ReadyWorkers >= n {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("fewer than %d ready workers after %v", n, within)
}

func (s *Stack) sampleRSS(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		for _, q := range []*Queue{s.Queue, s.Ingress} {
			if q == nil {
				continue
			}
			if v, err := q.RSS(); err == nil && v > s.rss.Load() {
				s.rss.Store(v)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Finish waits for the accepted invocations to end and counts.
func (s *Stack) Finish(t testing.TB, res LoadResult) Outcome {
	t.Helper()
	quiet, within := s.scenario.Quiet, s.scenario.Within
	if quiet <= 0 {
		quiet = 30 * time.Second
	}
	if within <= 0 {
		within = 3 * time.Minute
	}
	recs := Settle(context.Background(), s.Queue.URL, s.Namespace, res.Accepted, quiet, within)
	runs, err := execlog.Read(s.ExecLog)
	require.NoError(t, err)
	c := Count(res.Accepted, recs, runs)
	t.Logf("%s: %s", s.scenario.Name, c)
	return Outcome{Load: res, Counts: c, MaxRSS: s.rss.Load()}
}

// CaseDir is where a case keeps its logs, stores and execution log: a temp
// dir removed after the test, or a dir under RUNPLANE_CHAOS_DIR that is
// kept, to read the component logs of a failing case.
func CaseDir(t testing.TB, name string) string {
	t.Helper()
	root := os.Getenv("RUNPLANE_CHAOS_DIR")
	if root == "" {
		return t.TempDir()
	}
	require.NoError(t, os.MkdirAll(root, 0o755))
	dir, err := os.MkdirTemp(root, strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' {
			return '-'
		}
		return r
	}, name)+"-")
	require.NoError(t, err)
	t.Logf("logs of %s kept in %s", name, dir)
	return dir
}

// Note is the row's note: refusals the callers saw and the most runs of
// one invocation, when they say something.
func Note(res LoadResult, c Counts) string {
	var parts []string
	for code, n := range res.Refused {
		what := "HTTP " + strconv.Itoa(code)
		if code == 0 {
			what = "no answer"
		}
		parts = append(parts, fmt.Sprintf("%d refused (%s)", n, what))
	}
	if res.Dropped > 0 {
		parts = append(parts, fmt.Sprintf("%d not sent (callers busy)", res.Dropped))
	}
	if c.MaxStarts > 2 {
		parts = append(parts, fmt.Sprintf("one invocation ran %d times", c.MaxStarts))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}
