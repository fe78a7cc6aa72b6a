package queue

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/internal/natscallout"
)

// revoker ends the NATS access of the workers the activator says are gone
// (activator.Config.Revoke), off the informer's goroutine: each worker's
// account is revoked once per natscallout.RevokedHold, retried until every
// step has succeeded (its record, the revoking push, the delete) or the
// queue stops: a revocation must land within 10 s of the Pod's deletion,
// and late beats never.
type revoker struct {
	accounts *natscallout.WorkerAccounts
	clock    clock.PassiveClock
	log      *slog.Logger
	total    *prometheus.CounterVec

	mu   sync.Mutex
	done map[string]time.Time
}

func newRevoker(accounts *natscallout.WorkerAccounts, reg prometheus.Registerer, log *slog.Logger) *revoker {
	r := &revoker{accounts: accounts, clock: clock.RealClock{}, log: log.With("component", "nats-revoke"), done: map[string]time.Time{},
		total: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_nats_revocations_total",
			Help: "Workers whose NATS account was revoked (their Pod gone or no longer a worker of the pool), by result."}, []string{"result"})}
	// Every result starts at 0: the first revocation (or failure) is then
	// an increase, and the dashboard shows 0 rather than no data.
	for _, res := range []string{"revoked", "retrying", "failed"} {
		r.total.WithLabelValues(res)
	}
	if reg != nil {
		reg.MustRegister(r.total)
	}
	return r
}

// revokeFunc is the activator's Revoke: it starts the revocation on ctx
// (the queue's run) and returns at once.
func (r *revoker) revokeFunc(ctx context.Context) func(ns, pool, worker string) {
	return func(ns, pool, worker string) {
		if !r.first(ns + "/" + pool + "/" + worker) {
			return
		}
		go r.revoke(ctx, ns, pool, worker)
	}
}

// first reports whether worker is not already revoked (within RevokedHold).
func (r *revoker) first(worker string) bool {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if at, ok := r.done[worker]; ok && now.Sub(at) <= natscallout.RevokedHold {
		return false
	}
	for k, at := range r.done {
		if now.Sub(at) > natscallout.RevokedHold {
			delete(r.done, k)
		}
	}
	r.done[worker] = now
	return true
}

func (r *revoker) revoke(ctx context.Context, ns, pool, worker string) {
	var last error
	attempts := 0
	err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Cap: 5 * time.Second, Steps: math.MaxInt32},
		func(ctx context.Context) (bool, error) {
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			last = r.accounts.Revoke(actx, ns, pool, worker)
			if attempts++; last != nil && attempts == 5 {
				r.total.WithLabelValues("retrying").Inc()
				r.log.Error("revoking a gone worker's NATS account keeps failing; retrying until it lands",
					"namespace", ns, "pool", pool, "worker", worker, "err", last)
			}
			return last == nil, nil
		})
	if err != nil { // the queue is stopping; the next leader's informer sees the Pod gone again only if it is still listed
		r.total.WithLabelValues("failed").Inc()
		r.log.Error("stopped before a gone worker's NATS account was revoked; its connection lives until its user expires",
			"namespace", ns, "pool", pool, "worker", worker, "err", errors.Join(err, last))
		return
	}
	r.total.WithLabelValues("revoked").Inc()
	r.log.Info("revoked a gone worker's NATS account", "namespace", ns, "pool", pool, "worker", worker)
}
