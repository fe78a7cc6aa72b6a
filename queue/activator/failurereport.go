package activator

import (
	"log/slog"
	"time"
)

// failureReport tells the operator about a failure that comes back every
// round of a loop, without a line per round: Warn at the first failed
// round, again at most once per every while rounds keep failing (with how
// many failed in a row), and Info when a round succeeds again. The caller
// passes the time (its injected clock).
type failureReport struct {
	what  string
	every time.Duration
	// failed counts the failed rounds in a row; warned is the last Warn.
	failed int
	warned time.Time
}

// round reports one round's outcome (err nil: it succeeded).
func (r *failureReport) round(log *slog.Logger, now time.Time, err error) {
	if err == nil {
		if r.failed > 0 {
			log.Info(r.what+": succeeds again", "failedRounds", r.failed)
		}
		r.failed = 0
		return
	}
	r.failed++
	if r.failed == 1 || now.Sub(r.warned) >= r.every {
		log.Warn(r.what+": fails", "failedRounds", r.failed, "err", err)
		r.warned = now
	}
}
