package cluster

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Main runs a package's tests against one shared cluster: call it from
// TestMain. It starts the cluster (set receives it before any test runs),
// runs the tests, dumps the component logs if a test failed, stops every
// process and exits with the tests' code. SIGINT or SIGTERM stop the
// cluster too. RUNPLANE_E2E_DIR, when opts.Dir is empty, keeps the
// cluster's dir (state and logs) there.
func Main(m *testing.M, opts Options, set func(*Cluster)) {
	os.Exit(Run(m, opts, set))
}

// Run is Main without the exit: it returns the tests' exit code, for a
// TestMain that has its own clean-up after the cluster stopped.
func Run(m *testing.M, opts Options, set func(*Cluster)) int {
	return runMain(m, opts, func(_ context.Context, c *Cluster) (func(bool), error) {
		set(c)
		return func(bool) {}, nil
	})
}

// MainWith is Main with a set-up that may fail (what a suite starts on
// the cluster, such as test/stack's stack) and its tear-down, which runs
// after the tests (failed says whether one failed) and before the cluster
// stops.
func MainWith(m *testing.M, opts Options, setUp func(context.Context, *Cluster) (tearDown func(failed bool), err error)) {
	os.Exit(runMain(m, opts, setUp))
}

func runMain(m *testing.M, opts Options, setUp func(context.Context, *Cluster) (func(bool), error)) int {
	// A real node's first start builds its images: up to 30 minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	if opts.Logf == nil {
		opts.Logf = logf
	}
	if opts.Dir == "" {
		opts.Dir = os.Getenv("RUNPLANE_E2E_DIR")
	}
	c, err := Start(ctx, opts)
	if err != nil {
		logf("cluster: %v", err)
		return 1
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		if _, ok := <-signals; ok {
			c.Stop()
			os.Exit(130)
		}
	}()
	defer func() {
		signal.Stop(signals)
		close(signals)
	}()
	// A panicking test ends the binary without running deferred calls in
	// this goroutine; the parent-death signal still ends every process.
	defer c.Stop()
	tearDown, err := setUp(ctx, c)
	if err != nil {
		logf("set-up: %v", err)
		c.DumpLogs(logf, 40)
		return 1
	}
	code := m.Run()
	if code != 0 {
		c.DumpLogs(logf, 60)
	}
	tearDown(code != 0)
	return code
}

// ForTest is a control plane of t's own with namespace created in it, for a
// test that needs a real kube-apiserver but not a package-wide cluster;
// stopped when t ends, and skipped with -short (it starts processes).
func ForTest(t *testing.T, namespace string) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a kube-apiserver")
	}
	c, err := Start(t.Context(), Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(c.Stop)
	if err := c.CreateNamespace(t.Context(), namespace); err != nil {
		t.Fatalf("namespace %s: %v", namespace, err)
	}
	return c
}

// Namespace creates a namespace for t (ready for Pods: its default
// ServiceAccount exists; one that exists already is fine) and returns its
// name: name, or when empty one made from t's name (lower case, "/" and
// "_" as "-", at most 50 characters).
func (c *Cluster) Namespace(t testing.TB, name string) string {
	t.Helper()
	if name == "" {
		name = strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
		name = strings.TrimRight(name[:min(len(name), 50)], "-")
	}
	if err := c.CreateNamespace(t.Context(), name); err != nil {
		t.Fatalf("namespace %s: %v", name, err)
	}
	return name
}
