// Package logging is the one way a runplane binary logs: log/slog, as JSON
// (the chart's default, for log pipelines) or text (make dev's, for people),
// at a chosen level, with klog (client-go, kube libraries) and
// controller-runtime routed into the same handler so a process writes one
// format only.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Formats are the values of -log-format.
const (
	FormatJSON = "json"
	FormatText = "text"
)

// Options select the format and level; the zero value is JSON at info.
type Options struct {
	Format string // json (default) or text
	Level  string // debug, info (default), warn or error
}

// New returns a logger writing to w as opts say, or an error naming the bad
// value and the allowed ones.
func New(w io.Writer, opts Options) (*slog.Logger, error) {
	var level slog.Level
	if opts.Level != "" {
		if err := level.UnmarshalText([]byte(opts.Level)); err != nil {
			return nil, fmt.Errorf("log level %q: want debug, info, warn or error", opts.Level)
		}
	}
	ho := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(opts.Format) {
	case "", FormatJSON:
		return slog.New(slog.NewJSONHandler(w, ho)), nil
	case FormatText:
		return slog.New(slog.NewTextHandler(w, ho)), nil
	default:
		return nil, fmt.Errorf("log format %q: want %s or %s", opts.Format, FormatJSON, FormatText)
	}
}

// Install makes l the process's only log sink: slog's default (and with it
// the standard library's log package), klog's output and controller-runtime's
// logger. These three are process-wide by their libraries' design, so a main
// calls Install once before starting anything.
func Install(l *slog.Logger) {
	slog.SetDefault(l)
	klog.SetSlogLogger(l)
	crlog.SetLogger(logr.FromSlogHandler(l.Handler()))
}
