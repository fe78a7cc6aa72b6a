package logging

import (
	"context"
	"log/slog"

	"github.com/go-logr/logr"
)

// Manager is the logger to give a controller-runtime manager that runs
// leader election with LeaderElectionReleaseOnCancel: l, except that the
// manager's report of its own release of the Lease at a clean shutdown is
// written at INFO. controller-runtime (to v0.24 at least) calls the
// elector's OnStoppedLeading on that release too and logs it as the
// error "leader election lost" received "after stop sequence was engaged"
// (kubernetes-sigs/controller-runtime#3535): an ERROR a log pipeline
// pages on, at every rollout. A Lease lost while running still ends the
// manager's Start with that error, which the binary reports.
func Manager(l *slog.Logger) logr.Logger {
	return logr.FromSlogHandler(releaseAtStop{l.Handler()})
}

// The manager's record of the release: its message and error.
const (
	stopEngagedMsg = "error received after stop sequence was engaged"
	leaseLostErr   = "leader election lost"
)

type releaseAtStop struct{ slog.Handler }

func (h releaseAtStop) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelError && r.Message == stopEngagedMsg && leaseLost(r) {
		if !h.Enabled(ctx, slog.LevelInfo) {
			return nil
		}
		return h.Handler.Handle(ctx, slog.NewRecord(r.Time, slog.LevelInfo, "leader election Lease released at shutdown", r.PC))
	}
	return h.Handler.Handle(ctx, r)
}

func (h releaseAtStop) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, l)
}

func (h releaseAtStop) WithAttrs(as []slog.Attr) slog.Handler {
	return releaseAtStop{h.Handler.WithAttrs(as)}
}

func (h releaseAtStop) WithGroup(name string) slog.Handler {
	return releaseAtStop{h.Handler.WithGroup(name)}
}

func leaseLost(r slog.Record) bool {
	lost := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" && a.Value.String() == leaseLostErr {
			lost = true
			return false
		}
		return true
	})
	return lost
}
