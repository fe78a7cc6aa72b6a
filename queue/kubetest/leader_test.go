package kubetest_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runplane/runplane/queue/activator"
)

// TestRunElectedHandsOverWithoutOverlap runs two contenders for one Lease
// in this process. The leader is shut down while its activator takes a
// while to drain; the other may lead only after that activator returned,
// so two activators never run at once.
func TestRunElectedHandsOverWithoutOverlap(t *testing.T) {
	const drain = 500 * time.Millisecond
	var active, maxActive atomic.Int32
	leaders := make(chan string, 4)
	run := func(id string) func(context.Context) error {
		return func(ctx context.Context) error {
			n := active.Add(1)
			for {
				m := maxActive.Load()
				if n <= m || maxActive.CompareAndSwap(m, n) {
					break
				}
			}
			leaders <- id
			<-ctx.Done()
			time.Sleep(drain) // an activator finishing in-flight work
			active.Add(-1)
			return nil
		}
	}
	ctxs := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	for _, id := range []string{"a", "b"} {
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[id] = cancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := activator.RunElected(ctx, activator.Election{
				Client: env.Client(), Namespace: "default", Name: "overlap-test", Identity: id,
				LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond,
			}, run(id))
			if err != nil {
				t.Errorf("RunElected(%s): %v", id, err)
			}
		}()
	}
	defer func() {
		for _, cancel := range ctxs {
			cancel()
		}
		wg.Wait()
	}()
	var first string
	select {
	case first = <-leaders:
	case <-time.After(30 * time.Second):
		t.Fatal("nobody led within 30s")
	}
	ctxs[first]()
	select {
	case second := <-leaders:
		if second == first {
			t.Fatalf("%s led again after it was shut down", first)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the other contender did not take over within 30s")
	}
	if m := maxActive.Load(); m > 1 {
		t.Fatalf("%d activators ran at once", m)
	}
}
