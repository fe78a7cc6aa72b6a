// Command runplane-copy copies a directory tree in parallel, keeping modes,
// ownership, timestamps, symlinks and hard links (internal/copier). The
// storage controller's prepare-from-pvc Jobs run it; progress goes to stderr.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/runplane/runplane/internal/cmdline"
	"github.com/runplane/runplane/internal/copier"
	"github.com/runplane/runplane/internal/logging"
)

func main() {
	var from, to string
	var opts copier.Options
	flag.StringVar(&from, "from", "", "source directory (required)")
	flag.StringVar(&to, "to", "", "destination directory, created if missing (required)")
	flag.IntVar(&opts.Workers, "workers", 0, "parallel workers (default 4×CPUs)")
	flag.DurationVar(&opts.ProgressInterval, "progress-interval", 5*time.Second, "how often to report progress")
	log := cmdline.Parse(flag.CommandLine, os.Args[1:], logging.Options{})
	if from == "" || to == "" {
		log.Error("--from and --to are required")
		os.Exit(2)
	}
	opts.Progress = func(p copier.Progress) { log.Info("progress", "progress", p.String()) }
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if _, err := copier.Copy(ctx, from, to, opts); err != nil {
		log.Error("copy failed", "err", err)
		os.Exit(1)
	}
}
