package state

import (
	"cmp"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Workers is how workers are judged: the workers section of
// runplane-queue's configuration file (queue/config embeds it as it is,
// through activator.Workers), defaulted and checked here only.
type Workers struct {
	// MaxAttempts: losses that count before an invocation is dead-lettered
	// (default 3).
	MaxAttempts int `json:"maxAttempts,omitempty"`
	// HeartbeatInterval is the sidecars' -heartbeat-interval (the
	// configuration file's default: 5s; 0: not known, not checked).
	HeartbeatInterval metav1.Duration `json:"heartbeatInterval,omitzero"`
	// HeartbeatTimeout: a worker silent for this long gets no new work,
	// and is lost once SilentHold is over (default
	// DefaultHeartbeatTimeout; at least HeartbeatMultiple ×
	// HeartbeatInterval).
	HeartbeatTimeout metav1.Duration `json:"heartbeatTimeout,omitzero"`
	// SilentHold bounds how long, beyond HeartbeatTimeout, a silent
	// worker's attempts stay its own before they are given to another
	// worker. Never past an attempt's deadline (timeoutSeconds +
	// ExecutionGrace): by then its sidecar has given up on it. 0: until
	// that deadline; negative: no hold (lost at HeartbeatTimeout).
	//
	// Why hold: a worker that is frozen or cut off still runs what it
	// holds and delivers the outcome when it is heard again; giving the
	// work to another worker meanwhile runs it twice (the chaos case of a
	// sidecar frozen 20 s ran every invocation it held twice).
	SilentHold metav1.Duration `json:"silentHold,omitzero"`
}

// DefaultHeartbeatTimeout is the default of Workers.HeartbeatTimeout.
const DefaultHeartbeatTimeout = 15 * time.Second

// HeartbeatMultiple is the least heartbeat timeout, in worker heartbeat
// intervals: a worker is declared lost only after missing two heartbeats
// in a row and most of a third.
const HeartbeatMultiple = 3

// Default fills MaxAttempts and HeartbeatTimeout when zero (the interval
// stays as it is: 0 is "not known").
func (w *Workers) Default() {
	w.MaxAttempts = cmp.Or(w.MaxAttempts, 3)
	w.HeartbeatTimeout.Duration = cmp.Or(w.HeartbeatTimeout.Duration, DefaultHeartbeatTimeout)
}

// Validate refuses, on defaulted w, fewer than one attempt and a heartbeat
// timeout that one late or lost heartbeat would exceed (declaring a
// healthy worker lost and running its work again).
func (w Workers) Validate() error {
	if w.MaxAttempts < 1 {
		return fmt.Errorf("maxAttempts: %d: want at least 1", w.MaxAttempts)
	}
	timeout, interval := w.HeartbeatTimeout.Duration, w.HeartbeatInterval.Duration
	if interval > 0 && timeout < HeartbeatMultiple*interval {
		return fmt.Errorf("heartbeatTimeout: heartbeat timeout %s is below %d× the workers' heartbeat interval %s (%s): a single late heartbeat would declare a healthy worker lost and run its work again; raise workers.heartbeatTimeout to at least %s or lower the sidecars' -heartbeat-interval",
			timeout, HeartbeatMultiple, interval, HeartbeatMultiple*interval, HeartbeatMultiple*interval)
	}
	if timeout <= 0 {
		return fmt.Errorf("heartbeatTimeout: %s: want a positive duration", timeout)
	}
	return nil
}
