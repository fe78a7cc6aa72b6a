// Command runplane-extender runs runplane's kube-scheduler extender: flags
// become an extender.Config, and extender.Run does the rest.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender"
	"github.com/runplane/runplane/internal/cmdline"
	"github.com/runplane/runplane/internal/logging"
)

func main() {
	var cfg extender.Config
	var hosts, writeTLSDir, managed string
	flag.StringVar(&cfg.Namespace, "namespace", api.DefaultNamespace, "namespace of the catalog ConfigMap and the Lease")
	flag.StringVar(&cfg.Addr, "addr", "127.0.0.1:8443", "HTTPS listen address of filter, prioritize and bind (and of /metrics, /healthz, /readyz without --metrics-addr); keep it on loopback in the scheduler's Pod")
	flag.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "HTTPS listen address of /metrics, /healthz and /readyz; empty: served on --addr")
	flag.StringVar(&cfg.CertFile, "tls-cert-file", "", "serving certificate; self-signed at startup when empty")
	flag.StringVar(&cfg.KeyFile, "tls-key-file", "", "serving key")
	flag.StringVar(&hosts, "tls-hosts", "localhost,127.0.0.1", "comma-separated names/IPs of a self-signed certificate")
	cfg.MetricsCert.AddFlags(flag.CommandLine)
	flag.StringVar(&writeTLSDir, "write-tls-dir", "", "write a fresh CA (ca.crt) and a serving certificate for --tls-hosts (tls.crt, tls.key) into this directory and exit (the chart's init container)")
	flag.BoolVar(&cfg.LeaderElection, "leader-elect", true, "bind only while holding the Lease")
	flag.StringVar(&cfg.LeaseName, "leader-election-name", extender.DefaultLeaseName, "name of the leader-election Lease")
	flag.StringVar(&cfg.FollowLease, "follow-lease", "", "namespace/name of the co-located runplane-scheduler's Lease: bind while this host holds it (instead of --leader-elect)")
	flag.DurationVar(&cfg.LeaseDuration, "leader-election-lease-duration", 0, "leader-election lease duration (default 15s)")
	flag.DurationVar(&cfg.RenewDeadline, "leader-election-renew-deadline", 0, "leader-election renew deadline (default 10s)")
	flag.DurationVar(&cfg.RetryPeriod, "leader-election-retry-period", 0, "leader-election retry period (default 2s)")
	flag.StringVar(&cfg.StockNamespace, "stock-namespace", "", "namespace of the stock Deployments whose RunplaneStock status condition the leader keeps current (empty: none)")
	flag.DurationVar(&cfg.StockStatusPeriod, "stock-status-period", 0, "how often the leader checks the stock Deployments' RunplaneStock condition (default 10s)")
	flag.DurationVar(&cfg.ClaimTimeout, "claim-timeout", 0, "bound on deleting a placeholder and waiting until it is gone (default 10s)")
	flag.StringVar(&managed, "managed-resources", api.DefaultGPUResource, "comma-separated extended resources the runplane-scheduler's configuration lists as the extender's managedResources (the chart: scheduler.extender.gpuResource and scheduler.extender.managedResources); every resource a catalog spec requests must be one of them")
	flag.StringVar(&cfg.ReservationImage, "reservation-image", extender.DefaultReservationImage, "image of the reservation Pods that hold a preempting GPU Pod's room (the webhook's pause image)")
	flag.IntVar(&cfg.MaxEvictionsPerPod, "max-evictions-per-pod", 0, "cap on Pods evicted for one GPU Pod in any minute (default 8)")
	flag.IntVar(&cfg.MaxEvictionsPerNode, "max-evictions-per-node", 0, "cap on Pods evicted on one node in any minute (default 16)")
	flag.DurationVar(&cfg.PreemptBackoff, "preempt-backoff", 0, "how long Pods of other schedulers on a node are not preempted again once an eviction there did not lead to a bind (default 2m)")
	flag.StringVar(&cfg.PprofAddr, "pprof-addr", "", "serve net/http/pprof (plain HTTP, with mutex and block profiles) on this address, e.g. 127.0.0.1:6060; empty: off")
	cfg.Logger = cmdline.Parse(flag.CommandLine, os.Args[1:], logging.Options{})
	cfg.TLSHosts = commaList(hosts)
	for _, r := range commaList(managed) {
		cfg.ManagedResources = append(cfg.ManagedResources, corev1.ResourceName(r))
	}
	if writeTLSDir != "" {
		if err := extender.WriteSelfSignedDir(writeTLSDir, cfg.TLSHosts); err != nil {
			cmdline.Exit(fmt.Errorf("writing the serving certificate into %s: %w", writeTLSDir, err))
		}
		return
	}
	if cfg.FollowLease != "" {
		cfg.LeaderElection = false // following the scheduler's Lease replaces the own election
	}

	rc, err := cmdline.RESTConfig()
	if err != nil {
		cmdline.Exit(err)
	}
	cfg.RESTConfig = rc
	if cfg.PprofAddr != "" {
		// Sampled mutex and block profiles (lock contention in the
		// ledger, waits on the API), only when profiling is asked for.
		runtime.SetMutexProfileFraction(100)
		runtime.SetBlockProfileRate(int(time.Millisecond))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := extender.Run(ctx, cfg); err != nil {
		stop()
		cmdline.Exit(err)
	}
}

// commaList is s's comma-separated items, trimmed, without empty ones.
func commaList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
