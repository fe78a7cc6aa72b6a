package chaos_test

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/config"
	"github.com/runplane/runplane/test/chaos"
)

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// outage waits after, stops a process (SIGKILL), waits gap and starts it
// again: most faults' one outage.
func outage(ctx context.Context, after, gap time.Duration, stop func(), start func() error) error {
	if err := sleep(ctx, after); err != nil {
		return err
	}
	stop()
	if err := sleep(ctx, gap); err != nil {
		return err
	}
	return start()
}

// base is the common shape: 4 workers of concurrency 4, 20 ms a run.
func base(name string, rate float64, dur time.Duration) chaos.Scenario {
	return chaos.Scenario{Name: name, Workers: 4, Concurrency: 4, FrameworkEnv: []string{"CHAOS_SLEEP=20ms"}, Rate: rate, Duration: dur}
}

func runCase(t *testing.T, sc chaos.Scenario) chaos.Outcome {
	o := sc.Run(t, binaries(t))
	report(t, o.Row)
	return o
}

// TestQueueSIGKILL: the queue (ingress and activator) SIGKILLed once
// mid-load and restarted 1 s later. Short version in make test.
func TestQueueSIGKILL(t *testing.T) {
	sc := base("queue SIGKILL once", pick(100.0, 50.0), pick(30*time.Second, 5*time.Second))
	sc.Fault = func(ctx context.Context, s *chaos.Stack) error {
		return outage(ctx, sc.Duration/3, time.Second, s.Queue.Kill, s.Queue.Restart)
	}
	goal(t, runCase(t, sc))
}

// TestQueueSIGKILL12: issue case 1, the queue SIGKILLed 12 times, 0.2 s
// down each, at 150/s. Today a kill between creating the Record and
// publishing leaves a Record a retry answers "queued" without
// republishing: lost.
func TestQueueSIGKILL12(t *testing.T) {
	fullOnly(t)
	sc := base("queue SIGKILL 12x 0.2s", 150, 45*time.Second)
	sc.Fault = func(ctx context.Context, s *chaos.Stack) error {
		for range 12 {
			if err := outage(ctx, 3*time.Second, 200*time.Millisecond, s.Queue.Kill, s.Queue.Restart); err != nil {
				return err
			}
		}
		return nil
	}
	goal(t, runCase(t, sc))
}

// TestFrameworkRestart: issue case 2, the framework of every worker killed
// and restarted 2 s later, in turn. Today the sidecar fails work that never
// ran (and, failing fast, draws more).
func TestFrameworkRestart(t *testing.T) {
	fullOnly(t)
	sc := base("framework killed, back in 2s", 50, 30*time.Second)
	sc.Fault = func(ctx context.Context, s *chaos.Stack) error {
		for i := range 4 {
			fw := s.Workers[i%len(s.Workers)].Framework
			if err := outage(ctx, 5*time.Second, 2*time.Second, fw.Kill, fw.Start); err != nil {
				return err
			}
		}
		return nil
	}
	o := runCase(t, sc)
	goal(t, o)
	assert.Zero(t, o.Counts.FailedUnrun, "invocations failed without ever running: %s", o.Counts)
}

// TestNATSDown35s: issue case 3, nats-server down 35 s at 5/s. Today a
// result the sidecar cannot publish within its retries NAKs the dispatch,
// and the framework runs again.
func TestNATSDown35s(t *testing.T) {
	fullOnly(t)
	sc := base("nats-server down 35s", 5, 60*time.Second)
	// 2 s a run: about 10 invocations are running when the server goes,
	// and each has a result to publish during the outage.
	sc.FrameworkEnv = []string{"CHAOS_SLEEP=2s"}
	sc.Quiet, sc.Within = 60*time.Second, 4*time.Minute
	sc.Fault = func(ctx context.Context, s *chaos.Stack) error {
		return outage(ctx, 10*time.Second, 35*time.Second, s.NATS.Kill, s.NATS.Restart)
	}
	goal(t, runCase(t, sc))
}

// TestNATSRestart: nats-server stopped cleanly and started again at once.
func TestNATSRestart(t *testing.T) {
	fullOnly(t)
	sc := base("nats-server restart", 100, 30*time.Second)
	sc.Fault = func(ctx context.Context, s *chaos.Stack) error {
		if err := sleep(ctx, 10*time.Second); err != nil {
			return err
		}
		s.NATS.Stop(syscall.SIGTERM, 10*time.Second)
		return s.NATS.Restart()
	}
	goal(t, runCase(t, sc))
}

// TestStorageFull: issue case 4, JetStream's file store filled by another
// stream, then freed. New work may be refused (503); accepted work must
// neither be lost nor re-run.
func TestStorageFull(t *testing.T) {
	fullOnly(t)
	sc := base("JetStream store full, then freed", 50, 40*time.Second)
	sc.NATS = chaos.NATSOptions{MaxFileStore: 256 << 20}
	// The results stream reserves its MaxBytes: keep it within the store.
	sc.QueueConfig = func(c *config.QueueConfiguration) { c.Stream.ResultsMaxBytes = 32 << 20 }
	sc.Quiet, sc.Within = 45*time.Second, 4*time.Minute
	sc.Fault = func(ctx context.Context, s *chaos.Stack) error {
		if err := sleep(ctx, 10*time.Second); err != nil {
			return err
		}
		nc, err := nats.Connect(s.NATS.URL)
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		filler, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler.>"}, Storage: jetstream.FileStorage})
		if err != nil {
			return fmt.Errorf("filler stream: %w", err)
		}
		chunk := make([]byte, 512<<10)
		for i := 0; ; i++ {
			if _, err := js.Publish(ctx, "filler.x", chunk); err != nil {
				t.Logf("store full after %d MiB of filler: %v", i/2, err)
				break
			}
		}
		if err := sleep(ctx, 15*time.Second); err != nil {
			return err
		}
		return js.DeleteStream(ctx, filler.CachedInfo().Config.Name)
	}
	goal(t, runCase(t, sc))
}

// TestSidecarSIGSTOP: issue case 5, a sidecar frozen 20 s, past the
// heartbeat timeout (15 s, the default), then resumed. Today the resumed
// worker gets its old work again as a new attempt: run twice.
func TestSidecarSIGSTOP(t *testing.T) {
	fullOnly(t)
	sc := base("sidecar SIGSTOP 20s", 50, 45*time.Second)
	sc.FrameworkEnv = []string{"CHAOS_SLEEP=200ms"}
	sc.Quiet, sc.Within = 60*time.Second, 4*time.Minute
	sc.Fault = func(ctx context.Context, s *chaos.Stack) error {
		if err := sleep(ctx, 10*time.Second); err != nil {
			return err
		}
		sc := s.Workers[0].Sidecar
		if err := sc.Signal(syscall.SIGSTOP); err != nil {
			return err
		}
		if err := sleep(ctx, 20*time.Second); err != nil {
			return err
		}
		return sc.Signal(syscall.SIGCONT)
	}
	goal(t, runCase(t, sc))
}

// TestSidecarSIGKILL: a sidecar SIGKILLed mid-invocation and restarted
// 2 s later, as the kubelet restarts a container. Short version in make
// test. The restarted sidecar settles its journal at once (re-attaching to
// the calls the framework still runs), so nothing waits for the 30 s ack
// wait and no call starts twice.
func TestSidecarSIGKILL(t *testing.T) {
	sc := base("sidecar SIGKILL mid-invocation", pick(100.0, 50.0), pick(30*time.Second, 5*time.Second))
	sc.FrameworkEnv = []string{"CHAOS_SLEEP=100ms"}
	sc.Fault = func(ctx context.Context, s *chaos.Stack) error {
		p := s.Workers[0].Sidecar
		return outage(ctx, sc.Duration/3, 2*time.Second, p.Kill, p.Start)
	}
	o := runCase(t, sc)
	goal(t, o)
	assert.Zero(t, o.Counts.Restarted, "invocations the framework started more than once: %s", o.Counts)
}

// TestFrameworkSIGKILL: a framework SIGKILLed mid-invocation and restarted
// 1 s later.
func TestFrameworkSIGKILL(t *testing.T) {
	fullOnly(t)
	sc := base("framework SIGKILL mid-invocation", 100, 30*time.Second)
	sc.FrameworkEnv = []string{"CHAOS_SLEEP=100ms"}
	sc.Fault = func(ctx context.Context, s *chaos.Stack) error {
		p := s.Workers[0].Framework
		return outage(ctx, 10*time.Second, time.Second, p.Kill, p.Start)
	}
	o := runCase(t, sc)
	goal(t, o)
	assert.Zero(t, o.Counts.FailedUnrun, "invocations failed without ever running: %s", o.Counts)
}

// TestRollout: a rollout restart without Kubernetes: every 5 s a new
// worker starts (maxSurge 1) and an old one is SIGTERMed and drains.
func TestRollout(t *testing.T) {
	fullOnly(t)
	sc := base("rollout restart (SIGTERM one by one)", 100, 30*time.Second)
	sc.FrameworkEnv = []string{"CHAOS_SLEEP=100ms"}
	sc.Fault = func(ctx context.Context, s *chaos.Stack) error {
		old := append([]*chaos.Worker(nil), s.Workers...)
		for i, w := range old {
			if err := sleep(ctx, 5*time.Second); err != nil {
				return err
			}
			if _, err := s.AddWorker(t, "r"+strconv.Itoa(i)); err != nil {
				return err
			}
			w.Stop(30 * time.Second)
		}
		return nil
	}
	o := runCase(t, sc)
	goal(t, o)
	assert.Zero(t, o.Counts.Failed, "invocations failed in a rollout: %s", o.Counts)
}

// TestAlwaysFails: a framework that fails every invocation. Without a
// retry policy (the default) each fails once and never runs again; retries
// and their dead letter are queue/retry_test.go's.
func TestAlwaysFails(t *testing.T) {
	fullOnly(t)
	sc := base("framework always fails", 100, 30*time.Second)
	sc.FrameworkEnv = []string{"CHAOS_SLEEP=20ms", "CHAOS_MODE=fail"}
	o := runCase(t, sc)
	assert.Zero(t, o.Counts.Lost, "%s", o.Counts)
	assert.Zero(t, o.Counts.Succeeded, "%s", o.Counts)
	assert.Zero(t, o.Counts.Restarted, "a failed invocation ran again without a retry policy: %s", o.Counts)
	assert.Equal(t, o.Counts.Accepted, o.Counts.States[messages.StateFailed], "every invocation failed: %s", o.Counts)
}

// TestHangs: a framework that never answers; every invocation must time
// out (timeoutSeconds 2) and never run again.
func TestHangs(t *testing.T) {
	fullOnly(t)
	sc := base("framework hangs (timeout 2s)", 10, 30*time.Second)
	sc.Concurrency = 8
	sc.FrameworkEnv = []string{"CHAOS_MODE=hang"}
	sc.TimeoutSeconds = 2
	sc.Quiet, sc.Within = 60*time.Second, 3*time.Minute
	o := runCase(t, sc)
	goal(t, o)
	assert.Zero(t, o.Counts.Succeeded, "%s", o.Counts)
	assert.Zero(t, o.Counts.Restarted, "a timed-out invocation ran again: %s", o.Counts)
}

// TestLargeResults: results of 10 MiB, at the rate a 2-core machine
// allows: a 10 MiB round trip costs about 1.5 CPU-seconds (JSON and the
// Object Store, BenchmarkPayloadRoundTrip). The 31 results (310 MiB, kept
// an hour) need a namespace bucket above the default 128 MiB
// (-objects-max-bytes; beyond it a big result fails by design).
func TestLargeResults(t *testing.T) {
	fullOnly(t)
	sc := base("results of 10 MiB", 1, 30*time.Second)
	sc.FrameworkEnv = []string{"CHAOS_RESULT_BYTES=" + strconv.Itoa(10<<20)}
	sc.QueueConfig = func(c *config.QueueConfiguration) { c.Stream.ObjectsMaxBytes = 512 << 20 }
	o := runCase(t, sc)
	goal(t, o)
	assert.Equal(t, o.Counts.Accepted, o.Counts.Succeeded, "%s", o.Counts)
}
