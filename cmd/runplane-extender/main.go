// Command runplane-extender is runplane's kube-scheduler extender
// (extender.Run, a controller-runtime manager): its settings are one
// configuration file (-config, extender/config), its cluster is found as
// every controller-runtime binary finds it (-kubeconfig, $KUBECONFIG,
// in-cluster). -write-tls-dir is a mode, not a setting: the chart's init
// container writes the verbs' certificate for the file's tls.hosts and
// exits.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/runplane/runplane/extender"
	"github.com/runplane/runplane/extender/config"
	"github.com/runplane/runplane/internal/cmdline"
)

func main() {
	if err := run(); err != nil {
		cmdline.Exit(err)
	}
}

func run() error {
	writeTLSDir := flag.String("write-tls-dir", "", "write a fresh CA (ca.crt) and a serving certificate for the configuration's tls.hosts (tls.crt, tls.key) into this directory and exit (the chart's init container)")
	ec, log, err := cmdline.Configuration[config.ExtenderConfiguration](flag.CommandLine, os.Args[1:], "extender/README.md")
	if err != nil {
		return err
	}
	if *writeTLSDir != "" {
		if err := extender.WriteSelfSignedDir(*writeTLSDir, ec.TLS.Hosts); err != nil {
			return fmt.Errorf("writing the serving certificate into %s: %w", *writeTLSDir, err)
		}
		return nil
	}
	rc, err := cmdline.RESTConfig()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return extender.Run(ctx, extender.Config{ExtenderConfiguration: *ec, RESTConfig: rc, Logger: log})
}
