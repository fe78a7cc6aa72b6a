package shard

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// waiting says whether this replica waits for the replicas of another
// shard count to go (the Elector and the Guard alike): the gauge
// runplane_activator_shard_waiting, and one log line when it changes.
type waiting struct {
	gauge prometheus.Gauge
	on    bool
}

func newWaiting() *waiting {
	return &waiting{gauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "runplane_activator_shard_waiting",
		Help: "1 while this replica runs no activator shard because replicas of another shard count (leaderElection.shards) still run theirs, else 0."})}
}

// set records the replicas waited for (none: not waiting).
func (w *waiting) set(log *slog.Logger, shards int, waitFor []member) {
	on := len(waitFor) > 0
	if on == w.on {
		return
	}
	w.on = on
	if on {
		log.Warn("replicas of another shard count run shards: this replica runs none until they are gone", "shards", shards, "waitingFor", fmt.Sprint(waitFor))
		w.gauge.Set(1)
		return
	}
	log.Info("no replica of another shard count runs shards: this replica runs its own", "shards", shards)
	w.gauge.Set(0)
}
