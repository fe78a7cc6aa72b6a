package config

import (
	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/activator"
	"github.com/runplane/runplane/queue/callback"
)

// Queue is the queue.Config of c (defaulted and valid): its settings, without
// the process's parts (RESTConfig, Logger, TracerProvider, the bootstrapped
// trust and key files), which the binary adds.
func (c *QueueConfiguration) Queue() (queue.Config, error) {
	cert, err := c.Metrics.ServingCert()
	if err != nil {
		return queue.Config{}, err
	}
	metricsAddr := c.Metrics.BindAddress
	if metricsAddr == "0" {
		metricsAddr = ""
	}
	return queue.Config{
		NATS:      c.NATS.NATS,
		Callbacks: callback.Config{Delivery: c.Callbacks.Delivery}, CallbackKeyFile: c.Callbacks.SigningKeyFile,
		Stream: c.Stream,
		Listen: c.Listen, MetricsListen: metricsAddr, MetricsCert: cert,
		Namespace: c.WatchNamespace, StaticPools: c.StaticPools,
		LeaderElection: c.LeaderElection, LeaseNamespace: c.Namespace,
		InsecureDisableCallerAuth: c.InsecureDisableCallerAuth,
		CallerAuth:                callerauth.Options{Rates: c.CallerAuth},
		DisableIngress:            c.DisableIngress, DisableActivator: c.DisableActivator,
		Decisions: activator.Decisions{Workers: c.Workers, Limits: c.Limits}, MaxPayloadBytes: c.MaxPayloadBytes,
	}, nil
}
