package framework

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// The idempotent invoke: an extension of the contract that lets a sidecar
// restarted while the framework runs a call re-attach to that call rather
// than start it again. A framework that offers it says so in the
// CapabilitiesHeader of its health answers; the sidecar then
//
//   - sends each call's attempt in the envelope (Request.Attempt): a
//     POST /invoke for an (invocationID, attempt) the framework runs or ran
//     recently waits for that call and answers its outcome — it never runs
//     the call a second time;
//   - re-attaches after a restart with AttachHeader "only": a call the
//     framework does not know is answered 404 with AttachHeader "unknown",
//     never started (the sidecar no longer holds its payload);
//   - cancels with CancelHeader "true" (a caller's cancel, timeoutSeconds):
//     a hang-up alone no longer cancels such a call, it may be the sidecar
//     dying; a call nobody re-attaches to within the detach grace is
//     cancelled.
//
// A framework without it (the plain contract) gets at-most-once for calls a
// sidecar restart interrupts (sidecar/README.md).
const (
	CapabilitiesHeader         = "Runplane-Framework-Capabilities"
	CapabilityIdempotentInvoke = "idempotent-invoke"
	AttachHeader               = "Runplane-Attach"
	CancelHeader               = "Runplane-Cancel"
	// AttachOnly (AttachHeader) asks for a re-attach only; AttachUnknown
	// (AttachHeader) answers one for a call not known here.
	AttachOnly    = "only"
	AttachUnknown = "unknown"
)

// Defaults of the idempotent invoke's memory.
const (
	DefaultDetachGrace    = 5 * time.Minute
	DefaultRecentOutcomes = 1024
	DefaultRecentFor      = 10 * time.Minute
)

// callKey names one call: an attempt of an invocation.
type callKey struct {
	id      string
	attempt int
}

// call is one call the framework runs or ran.
type call struct {
	done     chan struct{} // closed with resp set
	resp     Response
	cancel   context.CancelFunc
	watchers int         // connections waiting for it
	detach   clock.Timer // runs while nobody waits (nil otherwise)
}

// calls keeps the calls in flight and the outcomes of recent ones, so a
// repeated invoke of a known call attaches to it.
type calls struct {
	clock       clock.WithDelayedExecution
	detachGrace time.Duration
	keep        int
	keepFor     time.Duration

	mu       sync.Mutex
	m        map[callKey]*call
	finished []finished // oldest first, at most keep
	// cancelled are cancels of calls not known yet: the sidecar's cancel
	// can overtake its own invoke (two connections), and the call must
	// then start cancelled rather than run detached for the grace.
	cancelled map[callKey]time.Time
}

type finished struct {
	k  callKey
	c  *call
	at time.Time
}

func newCalls(o handlerOptions) *calls {
	return &calls{clock: o.clock, detachGrace: o.detachGrace, keep: o.recent, keepFor: o.recentFor, m: map[callKey]*call{}}
}

// start returns the call of k (base: the request that starts it), starting run for it when it is new and
// start is true (nil when it is unknown and start is false). The returned
// call has one more watcher; the caller ends with release.
func (cs *calls) start(base context.Context, k callKey, begin bool, run func(ctx context.Context) Response) *call {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c, ok := cs.m[k]; ok {
		c.watchers++
		if c.detach != nil {
			c.detach.Stop()
			c.detach = nil
		}
		return c
	}
	if !begin {
		return nil
	}
	// The call runs on a context of its own, with the first request's
	// values: the connection ending (the sidecar dying) does not end it;
	// an explicit cancel or the detach grace does.
	ctx, cancel := context.WithCancel(context.WithoutCancel(base))
	if _, early := cs.cancelled[k]; early {
		delete(cs.cancelled, k)
		cancel()
	}
	c := &call{done: make(chan struct{}), cancel: cancel, watchers: 1}
	cs.m[k] = c
	go func() {
		resp := run(ctx)
		cancel()
		cs.mu.Lock()
		defer cs.mu.Unlock()
		c.resp = resp
		if c.detach != nil {
			c.detach.Stop()
			c.detach = nil
		}
		close(c.done)
		cs.remember(k)
	}()
	return c
}

// remember keeps k's outcome for keepFor, among at most keep, and drops
// the outcomes past either bound. Locked. Expiry is from the list, not a
// timer per call: a timer would hold its call (and response body) for
// keepFor whatever keep says.
func (cs *calls) remember(k callKey) {
	now := cs.clock.Now()
	cs.finished = append(cs.finished, finished{k: k, c: cs.m[k], at: now})
	for len(cs.finished) > 0 && (len(cs.finished) > cs.keep || now.Sub(cs.finished[0].at) >= cs.keepFor) {
		if old := cs.finished[0]; cs.m[old.k] == old.c {
			delete(cs.m, old.k)
		}
		cs.finished[0] = finished{}
		cs.finished = cs.finished[1:]
	}
}

// release drops a watcher of c; the last one leaving a running call starts
// its detach grace.
func (cs *calls) release(c *call) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c.watchers--
	select {
	case <-c.done:
		return
	default:
	}
	if c.watchers == 0 && c.detach == nil {
		c.detach = cs.clock.AfterFunc(cs.detachGrace, c.cancel)
	}
}

// cancel cancels the call of k; false when it is not known.
func (cs *calls) cancel(k callKey) bool {
	cs.mu.Lock()
	c, ok := cs.m[k]
	if !ok {
		cs.noteEarlyCancel(k)
	}
	cs.mu.Unlock()
	if ok {
		c.cancel()
	}
	return ok
}

// noteEarlyCancel remembers a cancel of a call not known yet for the
// detach grace, among at most keep. Locked.
func (cs *calls) noteEarlyCancel(k callKey) {
	now := cs.clock.Now()
	if cs.cancelled == nil {
		cs.cancelled = map[callKey]time.Time{}
	}
	for x, at := range cs.cancelled {
		if now.Sub(at) >= cs.detachGrace || len(cs.cancelled) >= cs.keep {
			delete(cs.cancelled, x)
		}
	}
	cs.cancelled[k] = now
}
