// Command runplane-queue runs the queue service (ingress and activator):
// flags → queue.Config → queue.Run.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/queue"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "runplane-queue:", err)
		os.Exit(1)
	}
}

func run() error {
	var c queue.Config
	var kubeconfig, pools string
	var inCluster, noKube bool
	flag.StringVar(&c.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL")
	flag.StringVar(&c.NATSUser, "nats-user", "", "the queue's NATS user (one of the server's auth_callout.auth_users); empty: no credentials")
	flag.StringVar(&c.NATSPasswordFile, "nats-password-file", "", "file holding the password of -nats-user")
	flag.StringVar(&c.Callout.IssuerSeedFile, "nats-callout-issuer-seed-file", "", "file holding the auth callout's issuer account nkey seed (its public key is the server's auth_callout.issuer); empty: no callout")
	flag.StringVar(&c.Callout.Account, "nats-callout-account", queue.DefaultCalloutAccount, "NATS account the callout places worker users in (the server's auth_callout.account)")
	flag.DurationVar(&c.Callout.MaxTTL, "nats-callout-max-ttl", time.Hour, "longest life of a worker's NATS user (shorter when its token expires sooner)")
	flag.StringVar(&c.Stream.Prefix, "subject-prefix", api.DefaultSubjectPrefix, "subject prefix")
	flag.StringVar(&c.Stream.Stream, "stream", api.DefaultStreamName, "JetStream stream name")
	flag.IntVar(&c.Stream.Replicas, "stream-replicas", 1, "stream and bucket replicas")
	flag.DurationVar(&c.Stream.MaxAge, "stream-max-age", 72*time.Hour, "stream message max age")
	flag.DurationVar(&c.Stream.DuplicateWindow, "duplicate-window", 2*time.Minute, "stream duplicate window")
	flag.Int64Var(&c.Stream.ResultsMaxBytes, "results-max-bytes", 1<<30, "size bound of the worker results stream (full: new results are refused and retried, none dropped)")
	flag.Func("result-max-size", "bound of one result message in bytes (default 1048576, nats-server's default max_payload)", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1 {
			return fmt.Errorf("result-max-size %q: a positive number of bytes", v)
		}
		c.Stream.ResultMaxMsgSize = int32(n)
		return nil
	})
	flag.StringVar(&c.Stream.RecordsBucket, "records-bucket", "runplane-invocations", "KV bucket of invocation records")
	flag.DurationVar(&c.Stream.RecordTTL, "record-ttl", 24*time.Hour, "how long invocation records are kept")
	flag.StringVar(&c.Listen, "listen", ":8080", "ingress listen address")
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig path (default: in-cluster config)")
	flag.BoolVar(&inCluster, "in-cluster", false, "use the in-cluster Kubernetes config")
	flag.BoolVar(&noKube, "no-kube", false, "run without Kubernetes: pools from -pools, no scaling")
	flag.StringVar(&pools, "pools", "", "comma-separated pools known without Kubernetes (with -no-kube), each namespace/pool (pool alone: namespace default)")
	flag.StringVar(&c.Namespace, "namespace", "", "namespace scope for pool Deployments and Pods (default all)")
	flag.BoolVar(&c.LeaderElection, "leader-elect", true, "run the activator only while holding the Lease (needs Kubernetes)")
	flag.StringVar(&c.LeaseNamespace, "leader-election-namespace", api.DefaultNamespace, "namespace of the activator Lease")
	flag.StringVar(&c.LeaseName, "leader-election-name", "runplane-queue-activator", "name of the activator Lease")
	flag.BoolVar(&c.DisableIngress, "no-ingress", false, "do not serve the ingress API")
	flag.BoolVar(&c.DisableActivator, "no-activator", false, "do not run the activator")
	flag.BoolVar(&c.InsecureDisableCallerAuth, "insecure-disable-caller-auth", false, "INSECURE: serve the ingress without bearer tokens, TokenReview and RBAC (benchmarks and tests of the unauthenticated baseline only; required with -no-kube)")
	flag.IntVar(&c.MaxBacklog, "max-backlog", 1000, "queued invocations allowed per pool (429 beyond)")
	flag.IntVar(&c.MaxAttempts, "max-attempts", 3, "dispatch attempts before dead-lettering")
	flag.DurationVar(&c.HeartbeatTimeout, "heartbeat-timeout", 15*time.Second, "worker silence before it is lost")
	flag.Parse()
	c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	if noKube {
		c.LeaderElection = false
		for _, p := range strings.Split(pools, ",") {
			if p = strings.TrimSpace(p); p != "" {
				c.StaticPools = append(c.StaticPools, p)
			}
		}
	} else {
		var err error
		if kubeconfig != "" && !inCluster {
			c.RESTConfig, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		} else {
			c.RESTConfig, err = rest.InClusterConfig()
		}
		if err != nil {
			return fmt.Errorf("kubernetes config (use -kubeconfig, -in-cluster or -no-kube): %w", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return queue.Run(ctx, c)
}
