package metricsauth

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/runplane/runplane/internal/pki"
)

// ExpiryGauge exports (the chart's RunplaneCertificateExpiring reads it) when the /metrics certificate k serves expires
// (Unix seconds; 0 before it is loaded), read at scrape time so each
// replica reports the certificate it serves itself.
func ExpiryGauge(k *pki.Keeper) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "runplane_metrics_certificate_expiry_timestamp_seconds",
		Help: "When the certificate the /metrics listener serves expires (Unix seconds; 0 before it is loaded).",
	}, func() float64 {
		if t := k.NotAfter(); !t.IsZero() {
			return float64(t.Unix())
		}
		return 0
	})
}
