// Command runplane-copy copies a directory tree in parallel, keeping modes,
// ownership, timestamps, symlinks and hard links (internal/copier). The
// storage controller's prepare-from-pvc Jobs run it; progress goes to stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
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
		cmdline.Exit(cmdline.Usage(errors.New("--from and --to are required")))
	}
	opts.Progress = func(p copier.Progress) { log.Info("progress", "progress", p.String()) }
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if _, err := copier.Copy(ctx, from, to, opts); err != nil {
		cmdline.Exit(fmt.Errorf("copy: %w", err))
	}
}
