// Command runplane-controller runs runplane's controllers (storage prepare,
// accessor, storage gate, egress restriction, NATS credentials sync, SSH Services):
// flags become a controllers.Config, and controllers.Run does the rest.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/controllers"
	"github.com/runplane/runplane/internal/cmdline"
	"github.com/runplane/runplane/internal/logging"
)

func main() {
	var cfg controllers.Config
	fs := flag.CommandLine // with controller-runtime's -kubeconfig
	fs.StringVar(&cfg.Namespace, "namespace", api.DefaultNamespace, "runplane's namespace (leader-election Lease, NATS credentials source)")
	fs.StringVar(&cfg.Image, "image", "", "runplane image for copy Jobs (runplane-copy) and accessors (runplane-accessor); required")
	fs.DurationVar(&cfg.PrepareDeadline, "prepare-deadline", 0, "activeDeadlineSeconds of prepare Jobs (default 6h)")
	fs.DurationVar(&cfg.ImagePullTimeout, "image-pull-timeout", 0, "fail a prepare attempt whose image cannot be pulled for this long (default 5m)")
	fs.StringVar(&cfg.ClusterDomain, "cluster-domain", "cluster.local", "cluster DNS domain, for accessor URLs")
	fs.Func("accessor-allowed-namespaces", "label selector of namespaces, besides a PVC's own, whose Pods may reach its accessor (default: none)", func(v string) error {
		sel, err := metav1.ParseToLabelSelector(v)
		if err != nil {
			return fmt.Errorf("accessor-allowed-namespaces %q: %w", v, err)
		}
		cfg.AccessorAllowedNamespaces = sel
		return nil
	})
	cfg.Egress.AddFlags(fs)
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", ":8080", "HTTPS address of /metrics, served only to scrapers RBAC allows get on /metrics (0 disables)")
	cfg.MetricsCert.AddFlags(fs)
	fs.StringVar(&cfg.ProbeAddr, "probe-addr", ":8081", "health probe address (/healthz, /readyz; 0 disables)")
	fs.BoolVar(&cfg.LeaderElection, "leader-elect", true, "run controllers only while holding the Lease")
	fs.StringVar(&cfg.LeaderElectionID, "leader-election-name", "runplane-controller", "name of the leader-election Lease")
	log := cmdline.Parse(fs, os.Args[1:], logging.Options{})

	if err := cfg.Egress.Validate(); err != nil {
		cmdline.Exit(cmdline.Usage(err))
	}
	var err error
	if cfg.RESTConfig, err = cmdline.RESTConfig(); err != nil {
		cmdline.Exit(err)
	}
	cfg.Logger = logging.Manager(log) // its own Lease release at shutdown is not an ERROR
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := controllers.Run(ctx, cfg); err != nil {
		stop()
		cmdline.Exit(err)
	}
}
