package extender

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/runplane/runplane/extender/ledger"
	"github.com/runplane/runplane/internal/metricsauth"
)

// metrics are the extender's Prometheus metrics, in controller-runtime's
// registry (registered) with the manager's own.
type metrics struct {
	latency *prometheus.HistogramVec
	// The verbs' observers, resolved once: filter and prioritize run every
	// scheduling cycle.
	filterLatency, prioritizeLatency, bindLatency prometheus.Observer
	steps                                         *prometheus.HistogramVec
	claims                                        *prometheus.CounterVec
	bindFailures                                  *prometheus.CounterVec
	refused                                       *prometheus.CounterVec
	binds                                         prometheus.Counter
	preemptions                                   *prometheus.CounterVec
	evictions                                     prometheus.Counter
	preemptionCaps                                *prometheus.CounterVec
	reservations                                  *prometheus.CounterVec
	leader                                        prometheus.Gauge
}

// newMetrics makes the extender's metrics, registered nowhere (tests read
// them directly); Start registers them.
func newMetrics() *metrics {
	m := &metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "runplane_extender_request_duration_seconds",
			Help:    "Latency of extender requests by verb (filter, prioritize, bind).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"verb"}),
		steps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "runplane_extender_bind_step_duration_seconds",
			Help:    "Latency of the API calls a bind makes, by step (claim_annotate, claim_delete, claim_wait, binding).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"step"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_extender_stock_claims_total",
			Help: "Stock placeholders claimed (deleted) for a GPU Pod, by spec.",
		}, []string{"spec"}),
		bindFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_extender_bind_failures_total",
			Help: "Failed binds by reason.",
		}, []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_extender_refused_requests_total",
			Help: "filter and bind requests refused (4xx) because the Pod they name does not exist, is another Pod, or is not runplane-scheduled, by verb.",
		}, []string{"verb"}),
		preemptions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_extender_preemptions_total",
			Help: "Preemptions of lower-priority Pods for a GPU Pod no node fits, by result (planned, evicted, failed, dropped).",
		}, []string{"result"}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runplane_extender_evictions_total",
			Help: "Pods evicted to make room for a GPU Pod (the Eviction API accepted them).",
		}),
		preemptionCaps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_extender_preemption_caps_total",
			Help: "Scheduling cycles of a GPU Pod in which a cap on evictions (per Pod or per node and minute) kept the only preemption, by cap (pod, node).",
		}, []string{"cap"}),
		reservations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_extender_reservations_total",
			Help: "Reservation Pods holding a preempting GPU Pod's room, by action (created, deleted: stale or rejected; those a GPU Pod took are runplane_extender_binds_total).",
		}, []string{"action"}),
		binds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runplane_extender_binds_total",
			Help: "Pods bound by the extender.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "runplane_extender_leader",
			Help: "1 while this replica holds the Lease and binds.",
		}),
	}
	m.resolve()
	return m
}

// resolve sets the series every extender exports from its start: the
// verbs' observers, and every bind failure reason at 0.
func (m *metrics) resolve() {
	m.filterLatency = m.latency.WithLabelValues("filter")
	m.prioritizeLatency = m.latency.WithLabelValues("prioritize")
	m.bindLatency = m.latency.WithLabelValues("bind")
	for _, r := range bindFailureReasons() {
		m.bindFailures.WithLabelValues(r)
	}
}

// registered is m in controller-runtime's registry, with the build
// information and the Go runtime's and the process's metrics. Another
// extender of this process (make dev restarting one, tests) shares its
// series (metricsauth.Register).
func (m *metrics) registered() (*metrics, error) {
	r := *m
	errs := []error{register(&r.latency), register(&r.steps), register(&r.claims), register(&r.bindFailures),
		register(&r.refused), register(&r.binds), register(&r.preemptions), register(&r.evictions),
		register(&r.preemptionCaps), register(&r.reservations), register(&r.leader), metricsauth.RegisterProcess()}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("extender: %w", err)
	}
	r.resolve()
	return &r, nil
}

// scrapeGauges registers the gauges read at scrape time: l's stock and the
// expiry of the certificates of certs (by listener). They replace the ones
// an earlier extender of this process registered, which read its ledger
// and listeners; Start calls it once it serves (an extender whose Start
// fails leaves the running one's).
func scrapeGauges(l *ledger.Ledger, certs map[string]*tls.Config) error {
	var errs []error
	gauges := []prometheus.Collector{stockCollector{l}}
	for listener, c := range certs {
		gauges = append(gauges, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "runplane_extender_certificate_expiry_timestamp_seconds",
			Help:        "When the certificate a listener serves expires (Unix seconds).",
			ConstLabels: prometheus.Labels{"listener": listener},
		}, func() float64 { return certExpiry(c) }))
	}
	for _, g := range gauges {
		ctrlmetrics.Registry.Unregister(g) // the previous extender's, reading its ledger and listeners
		errs = append(errs, register(&g))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("extender: %w", err)
	}
	return nil
}

// register replaces *c with the collector metricsauth.Register returns.
func register[C prometheus.Collector](c *C) error {
	var err error
	*c, err = metricsauth.Register(*c)
	return err
}

var (
	stockAvailableDesc = prometheus.NewDesc("runplane_extender_stock_available",
		"Bound, unclaimed stock placeholders (not being deleted) by spec and node.", []string{"spec", "node"}, nil)
	stockTotalDesc = prometheus.NewDesc("runplane_extender_stock_placeholders",
		"Bound stock placeholders (claimed or not) by spec and node.", []string{"spec", "node"}, nil)
)

// stockCollector reads the ledger at scrape time, so the gauges are never
// stale and cost nothing between scrapes.
type stockCollector struct{ l *ledger.Ledger }

func (c stockCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- stockAvailableDesc
	ch <- stockTotalDesc
}

func (c stockCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.l.Stock() {
		ch <- prometheus.MustNewConstMetric(stockAvailableDesc, prometheus.GaugeValue, float64(s.Available), s.Spec, s.Node)
		ch <- prometheus.MustNewConstMetric(stockTotalDesc, prometheus.GaugeValue, float64(s.Total), s.Spec, s.Node)
	}
}
