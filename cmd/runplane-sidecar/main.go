// Command runplane-sidecar is the worker sidecar of a serverless Pod. It is
// configured from the env the webhook injects (see api/env.go); the flags
// only tune timings. SIGTERM drains; a second signal exits at once.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/runplane/runplane/internal/cmdline"
	"github.com/runplane/runplane/internal/logging"
	"github.com/runplane/runplane/internal/tracing"
	"github.com/runplane/runplane/sidecar"
)

func main() {
	hb := flag.Duration("heartbeat-interval", sidecar.DefaultHeartbeatInterval, "how often to publish a heartbeat event")
	probe := flag.Duration("probe-interval", sidecar.DefaultProbeInterval, "how often to check the framework's health")
	ackWait := flag.Duration("ack-wait", sidecar.DefaultAckWait, "ack wait of the dispatch consumer (in-progress acks every third of it)")
	inactive := flag.Duration("inactive-threshold", sidecar.DefaultInactiveThreshold, "delete the durable consumer after this long without this worker")
	grace := flag.Duration("shutdown-grace", sidecar.DefaultShutdownGrace, "time in-flight invocations get to finish after SIGTERM (default: RUNPLANE_SHUTDOWN_GRACE_SECONDS, which the webhook sets, else 25s)")
	fetchWait := flag.Duration("fetch-wait", sidecar.DefaultFetchWait, "how long one pull request waits for a dispatch")
	create := flag.Bool("create-consumer", false, "create the dispatch consumer instead of binding to the one the queue's auth callout creates (only for a NATS without the callout: tests, local runs; under the callout the server refuses it)")
	var tr tracing.Settings
	tr.AddFlags(flag.CommandLine)
	log := cmdline.Parse(flag.CommandLine, os.Args[1:], logging.Options{}) // -log-level=debug logs every invocation

	cfg, err := sidecar.ConfigFromEnv(os.Getenv)
	if err != nil {
		cmdline.Exit(cmdline.Usage(fmt.Errorf("configuration: %w", err)))
	}
	cfg.HeartbeatInterval, cfg.ProbeInterval, cfg.AckWait = *hb, *probe, *ackWait
	cfg.InactiveThreshold, cfg.FetchWait = *inactive, *fetchWait
	// The env's grace (from the Pod's terminationGracePeriodSeconds) wins
	// over the flag's default; an explicit flag wins over both.
	if cfg.ShutdownGrace == 0 || flagSet("shutdown-grace") {
		cfg.ShutdownGrace = *grace
	}
	cfg.CreateConsumer = *create
	cfg.Logger = log

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	go func() {
		<-ctx.Done()
		stop() // a second signal now kills the process the default way
	}()
	tp, stopTracing, err := tr.Provider(ctx, "runplane-sidecar", os.Getenv)
	if err != nil {
		cmdline.Exit(cmdline.Usage(err))
	}
	defer tracing.Flush(stopTracing, log)
	cfg.TracerProvider = tp
	s, err := sidecar.New(cfg)
	if err != nil {
		cmdline.Exit(cmdline.Usage(err))
	}
	log.Info("runplane-sidecar: serving", "http", s.Addr())
	if err := s.Run(ctx); err != nil {
		cmdline.Exit(err)
	}
}

// flagSet reports whether flag name was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
