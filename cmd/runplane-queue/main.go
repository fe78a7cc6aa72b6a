// Command runplane-queue runs runplane's queue service (queue.Run): its
// settings are one configuration file (-config, queue/config), its
// cluster is found as every controller-runtime binary finds it
// (-kubeconfig, $KUBECONFIG, in-cluster; none with staticPools).
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"github.com/runplane/runplane/internal/cmdline"
	"github.com/runplane/runplane/internal/tracing"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/config"
)

func main() {
	if err := run(); err != nil {
		cmdline.Exit(err)
	}
}

func run() error {
	qc, log, err := cmdline.Configuration[config.QueueConfiguration](flag.CommandLine, os.Args[1:], "queue/README.md")
	if err != nil {
		return err
	}
	c, err := qc.Queue()
	if err != nil {
		return cmdline.Usage(err)
	}
	c.Logger = log
	if len(qc.StaticPools) == 0 {
		if c.RESTConfig, err = cmdline.RESTConfig(); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := bootstrap(ctx, qc, &c); err != nil {
		return err
	}
	if err := callbackKey(ctx, qc, &c); err != nil {
		return err
	}
	tp, stopTracing, err := qc.Tracing.Provider(ctx, "runplane-queue", os.Getenv)
	if err != nil {
		return cmdline.Usage(err)
	}
	defer tracing.Flush(stopTracing, c.Logger)
	c.TracerProvider = tp
	return queue.Run(ctx, c)
}
