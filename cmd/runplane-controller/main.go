// Command runplane-controller runs runplane's controllers (storage prepare,
// accessor, storage gate, egress restriction, SSH Services, DRA claim
// templates; controllers.Run): its settings are one configuration file
// (-config, controllers/config), its cluster is found as every
// controller-runtime binary finds it (-kubeconfig, $KUBECONFIG,
// in-cluster).
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"github.com/runplane/runplane/controllers"
	"github.com/runplane/runplane/controllers/config"
	"github.com/runplane/runplane/internal/cmdline"
	"github.com/runplane/runplane/internal/logging"
)

func main() {
	if err := run(); err != nil {
		cmdline.Exit(err)
	}
}

func run() error {
	cc, log, err := cmdline.Configuration[config.ControllerConfiguration](flag.CommandLine, os.Args[1:], "controllers/README.md") // with controller-runtime's -kubeconfig
	if err != nil {
		return err
	}
	rc, err := cmdline.RESTConfig()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The manager's own Lease release at shutdown is not an ERROR.
	return controllers.Run(ctx, controllers.Config{ControllerConfiguration: *cc, RESTConfig: rc, Logger: logging.Manager(log)})
}
