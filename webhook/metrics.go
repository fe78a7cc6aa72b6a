package webhook

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/runplane/runplane/internal/metricsauth"
)

// Outcomes of an admission, the outcome label of the admissions counter.
const (
	OutcomeMutated   = "mutated"   // a non-empty patch was returned
	OutcomeUnchanged = "unchanged" // admitted with an empty patch (e.g. a reinvocation)
	OutcomeAllowed   = "allowed"   // a validation passed
	OutcomeDenied    = "denied"    // the user's input was refused
	OutcomeError     = "error"     // the webhook failed (cluster state unreadable, bad review)
)

// Metrics are the webhook's Prometheus metrics.
type Metrics struct {
	admissions *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	certExpiry prometheus.Gauge
}

// NewMetrics makes the webhook's metrics, registered nowhere (tests read
// them directly); Run registers them.
func NewMetrics() *Metrics {
	return &Metrics{
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
}

// registered is m in controller-runtime's registry, with the build
// information and the Go runtime's and the process's metrics
// (metricsauth.Register: another webhook of this process shares its series).
func (m *Metrics) registered() (*Metrics, error) {
	var err error
	r := *m
	if r.admissions, err = metricsauth.Register(r.admissions); err != nil {
		return nil, err
	}
	if r.latency, err = metricsauth.Register(r.latency); err != nil {
		return nil, err
	}
	if r.certExpiry, err = metricsauth.Register(r.certExpiry); err != nil {
		return nil, err
	}
	return &r, metricsauth.RegisterProcess()
}
