package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/runplane/runplane/internal/buildinfo"
)

// Outcomes of an admission, the outcome label of the admissions counter.
const (
	OutcomeMutated   = "mutated"   // a non-empty patch was returned
	OutcomeUnchanged = "unchanged" // admitted with an empty patch (e.g. a reinvocation)
	OutcomeAllowed   = "allowed"   // a validation passed
	OutcomeDenied    = "denied"    // the user's input was refused
	OutcomeError     = "error"     // the webhook failed (cluster state unreadable, bad review)
)

// Metrics are the webhook's Prometheus metrics, on their own registry.
type Metrics struct {
	Registry   *prometheus.Registry
	admissions *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	certExpiry prometheus.Gauge
}

// NewMetrics registers the webhook's metrics and the Go runtime's.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runplane_webhook_admissions_total",
			Help: "Admission reviews by resource, feature (one count per feature a Pod asked for; none when it asked for nothing) and outcome.",
		}, []string{"resource", "feature", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "runplane_webhook_admission_duration_seconds",
			Help:    "Time to answer one admission review, from decoded request to encoded response.",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1},
		}, []string{"resource"}),
		certExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "runplane_webhook_certificate_expiry_timestamp_seconds",
			Help: "When the serving certificate expires (Unix seconds).",
		}),
	}
	m.Registry.MustRegister(m.admissions, m.latency, m.certExpiry, buildinfo.Collector(),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
