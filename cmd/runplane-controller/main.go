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
	file := flag.String("config", "", "the controller's configuration file (apiVersion "+config.APIVersion+", kind "+config.Kind+"; controllers/README.md); empty: the defaults")
	log := cmdline.Parse(flag.CommandLine, os.Args[1:], logging.Options{}) // with controller-runtime's -kubeconfig
	cc := config.New()
	if *file != "" {
		var err error
		if cc, err = config.Load(*file); err != nil {
			return cmdline.Usage(err)
		}
	}
	if err := cc.Validate(); err != nil { // the defaults alone lack the image
		return cmdline.Usage(err)
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
