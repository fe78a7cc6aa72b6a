package activator

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	accepted, dispatched, redelivered, lost, deadLettered *prometheus.CounterVec
	finished, scaled, ackErrors, foreign, refused         *prometheus.CounterVec
	maxDeliveries                                         *prometheus.CounterVec
	backlog, inflight                                     *prometheus.GaugeVec
	oldestQueued                                          *prometheus.GaugeVec
	rebuilt                                               prometheus.Gauge
	orphans                                               prometheus.Counter
	removed                                               *prometheus.CounterVec
	// purgeErrors counts the purge loop's failed requests (purge.go).
	purgeErrors *prometheus.CounterVec
	// retried counts failed executions run again under the pool's retry
	// policy; handedBack the attempts draining workers gave back unstarted.
	retried, handedBack *prometheus.CounterVec
	// silentWorkers counts workers that fell silent (their work held for them).
	silentWorkers *prometheus.CounterVec
	scaleFromZero prometheus.Histogram
}

// Metrics are the activator's metrics, shared by the shards one replica
// runs (their namespaces, so their series, are disjoint).
type Metrics struct{ m *metrics }

// NewMetrics makes the metrics and registers them with r (nil: not
// registered).
func NewMetrics(r prometheus.Registerer) *Metrics { return &Metrics{m: newMetrics(r)} }

// Every per-pool series carries namespace and pool: tenants name their
// pools, and two namespaces' same-named pools are two pools.
func newMetrics(r prometheus.Registerer) *metrics {
	m := &metrics{
		accepted:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_activator_invocations_accepted_total", Help: "Invocations taken from the stream."}, []string{"namespace", "pool"}),
		dispatched:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_activator_dispatches_total", Help: "Dispatches published to workers."}, []string{"namespace", "pool"}),
		redelivered:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_activator_redeliveries_total", Help: "Invocations requeued after their worker was lost."}, []string{"namespace", "pool"}),
		lost:         prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_activator_lost_invocations_total", Help: "In-flight invocations whose worker was lost."}, []string{"namespace", "pool"}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_activator_dead_lettered_total", Help: "Invocations dead-lettered."}, []string{"namespace", "pool"}),
		finished:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_activator_results_total", Help: "Terminal results recorded."}, []string{"namespace", "pool", "state"}),
		scaled:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_activator_scale_total", Help: "Scale operations."}, []string{"namespace", "pool", "direction"}),
		ackErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_activator_ack_errors_total",
			Help: "JetStream Ack, Nak and Term calls that failed (the message comes back after the ack wait)."}, []string{"consumer", "op"}),
		foreign: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_activator_foreign_messages_total",
			Help: "Worker messages refused or held: events and results naming another pool than their subject, events of workers whose Pod is not admitted to the pool, Pods labelled with a pool whose Deployment does not own them."}, []string{"kind"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_activator_results_refused_total",
			Help: "Results dropped because their attempt was not dispatched to the worker that sent them: without the attempt's result token (token), naming another worker (other_worker), an attempt never dispatched (unknown_attempt) or an invocation of another pool (other_pool)."}, []string{"reason"}),
		backlog:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "runplane_activator_backlog", Help: "Queued invocations per pool."}, []string{"namespace", "pool"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "runplane_activator_in_flight", Help: "Dispatched invocations per pool."}, []string{"namespace", "pool"}),
		oldestQueued: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "runplane_activator_oldest_queued_timestamp_seconds",
			Help: "When the invocation that has waited longest in a pool's queue was accepted (Unix seconds); no series while the queue is empty."}, []string{"namespace", "pool"}),
		retried: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_activator_retries_total",
			Help: "Failed executions queued again under their pool's retry policy (runplane.io/max-retries)."}, []string{"namespace", "pool"}),
		handedBack: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_activator_handed_back_total",
			Help: "Dispatches a draining worker handed back without running them (queued again at once, not counted as an attempt that ran)."}, []string{"namespace", "pool"}),
		silentWorkers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_activator_silent_workers_total",
			Help: "Workers not heard for the heartbeat timeout: they get no new work and what they hold waits for them (-silent-worker-hold)."}, []string{"namespace", "pool"}),
		rebuilt: prometheus.NewGauge(prometheus.GaugeOpts{Name: "runplane_activator_rebuilt",
			Help: "The activators of this replica that have rebuilt their state from JetStream (each dispatches only then): 1 while the unsharded activator's Lease holder runs, else 0; sharded, the shards this replica runs."}),
		maxDeliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_activator_max_deliveries_total",
			Help: "Messages that reached their consumer's MaxDeliver (a worker's dispatch: its invocation is dead-lettered with the reason in its Record)."}, []string{"consumer"}),
		removed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_activator_stream_messages_removed_total",
			Help: "Messages removed from the invocation stream, by who removed them: final (when the Record became final), sweep (left over, found later) or copy (a re-post's copy of an invocation held already, or a late one of a finished invocation)"}, []string{"by"}),
		purgeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_activator_purge_errors_total",
			Help: "Failed requests of the loop that removes finished invocations' messages from the invocation stream: purge (a subject below its floor), delete (one message) or ack_floor (the invoke consumer's ack floor read). Each is tried again the next round; while they fail, finished messages stay in the stream and count against its limits."}, []string{"op"}),
		orphans: prometheus.NewCounter(prometheus.CounterOpts{Name: "runplane_activator_orphan_records_removed_total",
			Help: "Queued Records removed at rebuild because their invocation never reached the stream (an accept cut off before its publish; its caller got no 202)."}),
		scaleFromZero: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "runplane_activator_scale_from_zero_seconds",
			Help: "From the oldest waiting invocation to the scale-up of an empty pool.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
	}
	// At 0 from the start: the first failure is an increase.
	for _, op := range []string{"purge", "delete", "ack_floor"} {
		m.purgeErrors.WithLabelValues(op)
	}
	if r != nil {
		for _, c := range []prometheus.Collector{m.accepted, m.dispatched, m.redelivered, m.lost, m.deadLettered, m.finished, m.scaled, m.ackErrors, m.foreign, m.refused, m.backlog, m.inflight, m.oldestQueued, m.rebuilt, m.orphans, m.removed, m.purgeErrors, m.maxDeliveries, m.scaleFromZero, m.retried, m.handedBack, m.silentWorkers} {
			_ = r.Register(c)
		}
	}
	return m
}

// knownPool starts a pool's event counters at 0 once the activator knows
// the pool: a series that first appears at 1 has no increase, so a panel's
// or an alert's increase() would miss the pool's first lost worker or dead
// letter, and would show no data rather than none happened.
func (m *metrics) knownPool(namespace, pool string) {
	for _, c := range []*prometheus.CounterVec{m.accepted, m.dispatched, m.redelivered, m.lost, m.deadLettered, m.retried, m.handedBack, m.silentWorkers} {
		c.WithLabelValues(namespace, pool)
	}
	for _, d := range []string{"up", "down"} {
		m.scaled.WithLabelValues(namespace, pool, d)
	}
}
