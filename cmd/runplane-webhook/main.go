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
	"github.com/runplane/runplane/internal/logging"
	"github.com/runplane/runplane/webhook"
	"github.com/runplane/runplane/webhook/config"
)

func main() {
	if err := run(); err != nil {
		cmdline.Exit(err)
	}
}

func run() error {
	file := flag.String("config", "", "the webhook's configuration file (apiVersion "+config.APIVersion+", kind "+config.Kind+"; webhook/README.md); empty: the defaults")
	log := cmdline.Parse(flag.CommandLine, os.Args[1:], logging.Options{})
	wc := config.New()
	if *file != "" {
		var err error
		if wc, err = config.Load(*file); err != nil {
			return cmdline.Usage(err)
		}
	}
	if err := wc.Validate(); err != nil { // the defaults alone lack the image and NATS
		return cmdline.Usage(err)
	}
	rc, err := cmdline.RESTConfig()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return webhook.Run(ctx, webhook.Config{WebhookConfiguration: *wc, RESTConfig: rc, Logger: log})
}
