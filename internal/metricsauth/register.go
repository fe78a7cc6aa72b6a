package metricsauth

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/runplane/runplane/internal/buildinfo"
)

// Register adds c to controller-runtime's registry, the one every
// component's /metrics serves, and returns the collector to use: c, or the
// equal one already there. Several instances of a component in one process
// (make dev restarting one, tests) share the process's series, as they share
// its registry.
func Register[C prometheus.Collector](c C) (C, error) {
	err := ctrlmetrics.Registry.Register(c)
	var dup prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
		return c, nil
	case errors.As(err, &dup):
		if existing, ok := dup.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	var zero C
	return zero, fmt.Errorf("metrics: registering %T: %w", c, err)
}

// RegisterProcess adds what every binary exports besides its own series to
// controller-runtime's registry: runplane_build_info and the Go runtime's and
// the process's collectors, configured as controller-runtime's controller
// package registers them (a binary with controllers has them already).
func RegisterProcess() error {
	for _, c := range []prometheus.Collector{buildinfo.Collector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsAll)),
	} {
		if _, err := Register(c); err != nil {
			return err
		}
	}
	return nil
}
