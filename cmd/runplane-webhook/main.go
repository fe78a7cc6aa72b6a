// Command runplane-webhook is runplane's admission webhook (webhook.Run, a
// controller-runtime manager): its settings are one configuration file
// (-config, webhook/config), its cluster is found as every
// controller-runtime binary finds it (-kubeconfig, $KUBECONFIG,
// in-cluster).
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"github.com/runplane/runplane/internal/cmdline"
	"github.com/runplane/runplane/webhook"
	"github.com/runplane/runplane/webhook/config"
)

func main() {
	if err := run(); err != nil {
		cmdline.Exit(err)
	}
}

func run() error {
	wc, log, err := cmdline.Configuration[config.WebhookConfiguration](flag.CommandLine, os.Args[1:], "webhook/README.md")
	if err != nil {
		return err
	}
	rc, err := cmdline.RESTConfig()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return webhook.Run(ctx, webhook.Config{WebhookConfiguration: *wc, RESTConfig: rc, Logger: log})
}
