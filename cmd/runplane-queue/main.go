// Command runplane-queue runs the queue service (ingress and activator):
// flags → queue.Config → queue.Run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/cmdline"
	"github.com/runplane/runplane/internal/logging"
	"github.com/runplane/runplane/internal/natscallout"
	"github.com/runplane/runplane/internal/objects"
	"github.com/runplane/runplane/internal/tracing"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/pool"
)

func main() {
	if err := run(); err != nil {
		cmdline.Exit(err)
	}
}

// float32Flag is a float32 flag (the flag package has only float64); its
// zero default leaves the package default.
type float32Flag struct{ p *float32 }

func (f float32Flag) String() string {
	if f.p == nil {
		return "0"
	}
	return strconv.FormatFloat(float64(*f.p), 'g', -1, 32)
}

func (f float32Flag) Set(s string) error {
	v, err := strconv.ParseFloat(s, 32)
	if err != nil {
		return err
	}
	if v <= 0 {
		return fmt.Errorf("%s: must be > 0", s)
	}
	*f.p = float32(v)
	return nil
}

func run() error {
	var c queue.Config
	var pools string
	var boot bootstrap
	var cb callbackFlags
	cb.register(&c)
	var tr tracing.Settings
	tr.AddFlags(flag.CommandLine)
	var noKube bool
	flag.StringVar(&c.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL")
	flag.StringVar(&c.NATSTrustFile, "nats-trust-file", "", "file holding the secret runplane's NATS operator, accounts and users are derived from (the server trusts its operator); the queue then serves the auth callout, placing each worker in an account of its own; empty: a NATS without auth")
	flag.StringVar(&c.NATSTLS.CAFile, "nats-ca-file", "", "file of the PEM CAs NATS's certificate is verified with (re-read on every reconnect); with -nats-server-name every NATS connection is TLS first and verified; empty (and no -nats-tls-secret): a NATS without TLS")
	flag.StringVar(&c.NATSTLS.ServerName, "nats-server-name", "", "the name NATS's certificate must carry, whatever host -nats-url names")
	flag.DurationVar(&c.Callout.MaxTTL, "nats-callout-max-ttl", time.Hour, "longest life of a worker's NATS user (shorter when its token expires sooner)")
	flag.Var(float32Flag{&c.Callout.Client.QPS}, "nats-callout-kube-qps", "client-side QPS of the callout's own Kubernetes client (default 50)")
	flag.IntVar(&c.Callout.Client.Burst, "nats-callout-kube-burst", 100, "client-side burst of the callout's own Kubernetes client")
	flag.IntVar(&c.Callout.Workers, "nats-callout-workers", 16, "authorization requests the callout reviews at once; beyond, a request is refused at once (the client retries)")
	flag.DurationVar(&c.Callout.AnswerTimeout, "nats-callout-answer-timeout", 1500*time.Millisecond, "deadline of one callout answer; keep it below nats-server's auth callout timeout (2s)")
	flag.Var(float32Flag{&c.Callout.PerHostQPS}, "nats-callout-per-host-qps", "callout reviews per second one client address may cause; beyond, refused at once (default 5)")
	flag.IntVar(&c.Callout.PerHostBurst, "nats-callout-per-host-burst", 20, "burst of one client address's callout reviews")
	flag.DurationVar(&c.Callout.CacheTTL, "nats-callout-cache-ttl", time.Minute, "how long an admission is reused for a reconnect with the same token (never past the token's expiry)")
	flag.Int64Var(&c.Callout.MaxSubscriptions, "nats-callout-max-subscriptions", natscallout.DefaultSubscriptions, "subscriptions one worker connection may hold on top of one per unit of its runplane.io/concurrency; beyond, refused (-1: unbounded)")
	flag.Int64Var(&c.Callout.MaxPayload, "nats-callout-max-payload", 0, "largest message in bytes a worker may publish, headers included; more closes its connection "+
		"(0: the largest the sidecar sends, -result-max-size unless a stream chunk's bound is larger; -1: only the server's max_payload)")
	flag.Var(float32Flag{&c.CallerAuthClient.QPS}, "caller-auth-kube-qps", "client-side QPS of caller authentication's own Kubernetes client (default 50)")
	flag.IntVar(&c.CallerAuthClient.Burst, "caller-auth-kube-burst", 100, "client-side burst of caller authentication's own Kubernetes client")
	flag.Var(float32Flag{&c.CallerAuth.TokenReviewQPS}, "caller-auth-token-review-qps", "TokenReviews per second of bearer tokens not in the cache, all callers together; beyond, 429 (default 20)")
	flag.IntVar(&c.CallerAuth.TokenReviewBurst, "caller-auth-token-review-burst", 40, "burst of those TokenReviews")
	flag.Var(float32Flag{&c.CallerAuth.AccessReviewQPS}, "caller-auth-access-review-qps", "SubjectAccessReviews per second one caller may cause with requests not in its cache; beyond, 429 (default 5)")
	flag.IntVar(&c.CallerAuth.AccessReviewBurst, "caller-auth-access-review-burst", 20, "burst of one caller's SubjectAccessReviews")
	flag.StringVar(&c.Stream.Prefix, "subject-prefix", api.DefaultSubjectPrefix, "subject prefix")
	flag.StringVar(&c.Stream.Stream, "stream", api.DefaultStreamName, "JetStream stream name")
	flag.IntVar(&c.Stream.Replicas, "stream-replicas", 1, "stream and bucket replicas")
	flag.IntVar(&c.NATSServers, "nats-servers", 0, "NATS servers in the cluster: a /metrics scrape stops waiting for VARZ answers once that many came (0: unknown, it waits 500 ms)")
	flag.DurationVar(&c.Stream.MaxAge, "stream-max-age", 72*time.Hour, "stream message max age")
	flag.Int64Var(&c.Stream.MaxBytes, "stream-max-bytes", -1, "size bound of the invocation stream (full: new invocations get 503, none stored is dropped; -1: unbounded, the server's limits apply)")
	flag.Int64Var(&c.Stream.RecordsMaxBytes, "records-max-bytes", -1, "size bound of the invocation Records bucket (full: new invocations get 503; -1: unbounded)")
	flag.DurationVar(&c.Stream.DuplicateWindow, "duplicate-window", 2*time.Minute, "stream duplicate window")
	flag.Int64Var(&c.Stream.ResultsMaxBytes, "results-max-bytes", 1<<30, "size bound of the worker results stream (full: new results are refused and retried, none dropped)")
	flag.DurationVar(&c.Stream.Chunks.MaxAge, "chunks-max-age", time.Hour, "how long the chunks of a streamed invocation are kept: it can be read and resumed (Last-Event-ID) that long")
	flag.Int64Var(&c.Stream.Chunks.MaxBytes, "chunks-max-bytes", 64<<20, "size bound of each namespace's chunks stream of streamed invocations, the tenant's budget, reserved in JetStream storage when it is made (full: that namespace's oldest chunks go)")
	flag.Int64Var(&c.Stream.Chunks.MaxPerInvocation, "chunks-per-invocation", 100000, "chunks kept per streamed invocation (more: the framework's stream fails the invocation)")
	flag.Func("result-max-size", "bound of one result message in bytes (default 1048576, nats-server's default max_payload)", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 1 {
			return fmt.Errorf("result-max-size %q: a positive number of bytes", v)
		}
		c.Stream.ResultMaxMsgSize = int32(n)
		return nil
	})
	flag.Int64Var(&c.MaxPayloadBytes, "max-payload-bytes", objects.DefaultMaxPayloadBytes, "largest payload and response body in bytes (JSON text, or decoded binary); beyond, 413. "+
		"What does not fit in one NATS message (max_payload) goes through the pool's Object Store bucket")
	flag.Int64Var(&c.Stream.ObjectsMaxBytes, "objects-max-bytes", 128<<20, "size bound of each namespace's Object Store bucket of big payloads and results, shared by its pools: the tenant's budget, reserved in JetStream storage "+
		"when the bucket is made (size max_file_store ≥ namespaces × this + the streams; -1: unbounded, no budget; full: that namespace's new big payloads get 503, big results fail)")
	flag.StringVar(&c.Stream.RecordsBucket, "records-bucket", "runplane-invocations", "KV bucket of invocation records")
	flag.DurationVar(&c.Stream.RecordTTL, "record-ttl", 24*time.Hour, "how long invocation records are kept")
	flag.StringVar(&c.Listen, "listen", ":8080", "ingress listen address (the ingress API and probes; never /metrics)")
	c.MetricsCert.AddFlags(flag.CommandLine)
	flag.StringVar(&c.MetricsListen, "metrics-addr", ":8443", "HTTPS address of /metrics, served only to scrapers the API server authenticates and RBAC allows get on /metrics "+
		"(with -no-kube: to anyone, and only with -insecure-disable-caller-auth); empty: not served")
	flag.BoolVar(&noKube, "no-kube", false, "run without Kubernetes: pools from -pools, no scaling")
	flag.StringVar(&pools, "pools", "", "comma-separated pools known without Kubernetes (with -no-kube), each namespace/pool (pool alone: namespace default)")
	flag.StringVar(&c.LeaseNamespace, "namespace", api.DefaultNamespace, "runplane's namespace (the activator's Lease)")
	flag.StringVar(&c.Namespace, "watch-namespace", "", "the only namespace whose pool Deployments and Pods are watched (default all)")
	flag.BoolVar(&c.LeaderElection, "leader-elect", true, "run the activator only while holding the Lease (needs Kubernetes)")
	flag.StringVar(&c.LeaseName, "leader-election-name", "runplane-queue-activator", "name of the activator Lease")
	flag.BoolVar(&c.DisableIngress, "no-ingress", false, "do not serve the ingress API")
	flag.BoolVar(&c.DisableActivator, "no-activator", false, "do not run the activator")
	flag.BoolVar(&c.InsecureDisableCallerAuth, "insecure-disable-caller-auth", false, "INSECURE: serve the ingress without bearer tokens, TokenReview and RBAC (benchmarks and tests of the unauthenticated baseline only; required with -no-kube)")
	flag.IntVar(&c.Limits.PoolMaxBacklog, "max-backlog", pool.DefaultPoolMaxBacklog, "queued invocations allowed per pool unless its runplane.io/max-backlog says otherwise (429 beyond; -1: unbounded)")
	flag.IntVar(&c.Limits.PoolMaxInFlight, "max-in-flight", -1, "dispatched invocations allowed per pool unless its runplane.io/max-in-flight says otherwise (-1: unbounded, replicas × concurrency bound it)")
	flag.IntVar(&c.Limits.NamespaceMaxStreams, "namespace-max-streams", pool.DefaultNamespaceMaxStreams, "result streams (SSE) open per namespace on one ingress replica (429 beyond; -1: unbounded)")
	flag.IntVar(&c.Limits.NamespaceMaxBacklog, "namespace-max-backlog", pool.DefaultNamespaceMaxBacklog, "queued invocations allowed per namespace, all its pools together (429 beyond; -1: unbounded)")
	flag.Int64Var(&c.Limits.NamespaceMaxStreamBytes, "namespace-max-stream-bytes", pool.DefaultNamespaceMaxStreamBytes, "bytes of the invocation stream a namespace's queued and running invocations may hold, "+
		"their messages and dispatches (429 for that namespace beyond; -1: unbounded)")
	flag.Int64Var(&c.Limits.NamespaceMaxRecordBytes, "namespace-max-record-bytes", pool.DefaultNamespaceMaxRecordBytes, "bytes of the Records bucket a namespace's Records may hold, "+
		"each kept -record-ttl after its last change (429 for that namespace beyond; -1: unbounded)")
	flag.IntVar(&c.Limits.NamespaceMaxInFlight, "namespace-max-in-flight", pool.DefaultNamespaceMaxInFlight, "dispatched invocations allowed per namespace, all its pools together (-1: unbounded)")
	flag.IntVar(&c.MaxAttempts, "max-attempts", 3, "dispatch attempts before dead-lettering")
	flag.DurationVar(&c.HeartbeatTimeout, "heartbeat-timeout", 15*time.Second, "worker silence before it gets no new work (at least 3× -worker-heartbeat-interval)")
	flag.DurationVar(&c.SilentHold, "silent-worker-hold", 0, "how long, beyond -heartbeat-timeout, a silent worker's work waits for it before another worker runs it "+
		"(0: until each invocation's own deadline, timeoutSeconds + 10s, so a frozen or cut-off worker's finished work is not run a second time elsewhere; negative: no wait)")
	flag.DurationVar(&c.WorkerHeartbeatInterval, "worker-heartbeat-interval", 5*time.Second, "the workers' heartbeat interval (the sidecars' -heartbeat-interval); -heartbeat-timeout below 3× it is refused at start")
	flag.StringVar(&boot.namespace, "bootstrap-secrets-namespace", "", "create the bundled NATS's Secrets below in this namespace when they do not exist (an existing one is used as it is) and read the trust secret from there instead of -nats-trust-file")
	flag.StringVar(&boot.trust, "nats-trust-secret", "", "with -bootstrap-secrets-namespace: Secret of the NATS trust chain (keys secret, read by the queue, and trust.conf, included by nats-server)")
	flag.StringVar(&boot.resolverDir, "nats-resolver-dir", "/data/jwt", "with -bootstrap-secrets-namespace: where the bundled nats-server's resolver stores account JWTs (written into trust.conf)")
	flag.StringVar(&boot.route, "nats-route-secret", "", "with -bootstrap-secrets-namespace: Secret of the NATS cluster's route password (key password; only nats-server reads it)")
	flag.StringVar(&boot.tls, "nats-tls-secret", "", "with -bootstrap-secrets-namespace: Secret of the bundled NATS's CA and certificate (tls.crt, tls.key, ca-bundle.crt for nats-server; ca.key stays with the queue), created and renewed here (internal/pki), "+
		"its CA bundle published in the ConfigMap "+api.NATSCAConfigMap+" for the webhook and trusted by the queue; a server serving another certificate is asked to reload")
	flag.StringVar(&boot.tlsNames, "nats-tls-dns-names", "", "with -nats-tls-secret: comma-separated DNS names of the certificate (the Service's names, the servers' per-Pod names of the routes, wildcards allowed)")
	flag.DurationVar(&boot.tlsInterval, "nats-tls-check-interval", time.Minute, "with -nats-tls-secret: how often the certificate is checked for renewal and the servers for the certificate they serve")
	flag.StringVar(&boot.dir, "bootstrap-dir", "/var/run/runplane/bootstrap", "directory (memory-backed) where the bootstrapped trust secret is written for the queue's own use")
	c.Logger = cmdline.Parse(flag.CommandLine, os.Args[1:], logging.Options{})
	if noKube {
		c.LeaderElection = false
		for _, p := range strings.Split(pools, ",") {
			if p = strings.TrimSpace(p); p != "" {
				c.StaticPools = append(c.StaticPools, p)
			}
		}
	} else {
		var err error
		if c.RESTConfig, err = cmdline.RESTConfig(); err != nil {
			return fmt.Errorf("%w (or -no-kube)", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if boot.namespace != "" {
		if c.RESTConfig == nil {
			return fmt.Errorf("-bootstrap-secrets-namespace needs Kubernetes")
		}
		if err := boot.run(ctx, c.RESTConfig, &c); err != nil {
			return err
		}
	}
	if err := cb.apply(ctx, c.RESTConfig, &c); err != nil {
		return err
	}
	tp, stopTracing, err := tr.Provider(ctx, "runplane-queue", os.Getenv)
	if err != nil {
		return cmdline.Usage(err)
	}
	defer tracing.Flush(stopTracing, c.Logger)
	c.TracerProvider = tp
	return queue.Run(ctx, c)
}
