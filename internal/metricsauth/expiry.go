package metricsauth

import (
	"errors"
	"fmt"

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

// RegisterExpiry registers k's ExpiryGauge in r. When r has one already —
// another component of this process serving its own /metrics on the same
// registry (make dev runs the controllers and the queue in one process) —
// that one stays: the series has no label to tell two apart, and each
// binary on its own has only its own.
func RegisterExpiry(r prometheus.Registerer, k *pki.Keeper) error {
	err := r.Register(ExpiryGauge(k))
	if dup := (prometheus.AlreadyRegisteredError{}); err != nil && !errors.As(err, &dup) {
		return fmt.Errorf("metrics certificate expiry gauge: %w", err)
	}
	return nil
}
