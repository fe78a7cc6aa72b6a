package cluster

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// Main runs a package's tests against one shared cluster: call it from
// TestMain. It starts the cluster (set receives it before any test runs),
// runs the tests, dumps the component logs if a test failed, stops every
// process and exits with the tests' code. SIGINT or SIGTERM stop the
// cluster too.
func Main(m *testing.M, opts Options, set func(*Cluster)) {
	os.Exit(Run(m, opts, set))
}

// Run is Main without the exit: it returns the tests' exit code, for a
// TestMain that has its own clean-up after the cluster stopped.
func Run(m *testing.M, opts Options, set func(*Cluster)) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if opts.Logf == nil {
		opts.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}
	c, err := Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cluster: %v\n", err)
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
	set(c)
	code := m.Run()
	if code != 0 {
		c.DumpLogs(func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }, 60)
	}
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
