package queue

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/natsaccounts"
	"github.com/runplane/runplane/internal/natscallout"
	"github.com/runplane/runplane/internal/natsconn"
	"github.com/runplane/runplane/internal/natstls"
	"github.com/runplane/runplane/queue/stream"
)

// NATS is the connection to NATS, its trust, TLS and auth callout: the nats
// section of runplane-queue's configuration file but its bootstrap.
type NATS struct {
	// URL of the NATS server (required by Run, which does not default it).
	URL string `json:"url,omitempty"`
	// TrustFile holds the secret runplane's NATS trust chain is derived
	// from (internal/natsaccounts): with it the queue connects as its user
	// and serves the auth callout (needs RESTConfig); empty: no auth.
	TrustFile string `json:"trustFile,omitempty"`
	// Client verifies the server (keys caFile, serverName). Zero: no TLS.
	natstls.Client
	// Servers answer a VARZ ping: a scrape's runplane_nats_servers ends
	// once that many have (0: unknown, every scrape waits 500 ms).
	Servers int           `json:"servers,omitempty"`
	Callout CalloutConfig `json:"callout"`
}

// Default fills the zero fields.
func (n *NATS) Default() {
	n.URL = cmp.Or(n.URL, "nats://127.0.0.1:4222")
	n.Callout.Default()
}

// CalloutConfig tunes the NATS auth callout, which every queue replica
// serves when the queue has a NATS trust secret (Config.NATS.TrustFile):
// requests are shared by the replicas' queue group (no leader election);
// each authenticates a sidecar's projected ServiceAccount token with the
// apiserver and places the sidecar in an account of its worker's own
// (natsaccounts), importing exactly its worker's subjects.
//
// It is the nats.callout section of runplane-queue's configuration file
// (queue/config embeds it as it is), defaulted by Default.
type CalloutConfig struct {
	// MaxTTL caps a worker's NATS user even when its token lives longer
	// (default 1h).
	MaxTTL metav1.Duration `json:"maxTTL,omitzero"`
	// KubeQPS and KubeBurst limit the callout's own Kubernetes client
	// (default 50, 100): no other part of the queue spends it, so a flood
	// at the ingress cannot delay a worker's admission.
	KubeQPS   float32 `json:"kubeQPS,omitempty"`
	KubeBurst int     `json:"kubeBurst,omitempty"`
	// Workers: requests reviewed at once; beyond, refused (default 16).
	// AnswerTimeout bounds each answer, below nats-server's auth callout
	// timeout of 2s (default 1.5s). natscallout.ServeOptions.
	Workers       int             `json:"workers,omitempty"`
	AnswerTimeout metav1.Duration `json:"answerTimeout,omitzero"`
	// PerHostQPS and PerHostBurst: reviews one client address may cause
	// (default 5, 20; natscallout.ServeOptions).
	PerHostQPS   float32 `json:"perHostQPS,omitempty"`
	PerHostBurst int     `json:"perHostBurst,omitempty"`
	// CacheTTL: an admission is reused this long for a reconnect with the
	// same token (default 1m; natscallout.CacheOptions).
	CacheTTL metav1.Duration `json:"cacheTTL,omitzero"`
	// MaxSubscriptions of one worker connection on top of one per unit of
	// its concurrency (default natscallout.DefaultSubscriptions; -1:
	// unbounded).
	MaxSubscriptions int64 `json:"maxSubscriptions,omitempty"`
	// MaxPayload: largest message a worker may publish (0: the largest the
	// sidecar sends, workerMaxPayload; -1: only the server's max_payload).
	MaxPayload int64 `json:"maxPayload,omitempty"`
}

// Default fills the zero fields (MaxPayload aside: it follows the stream's
// sizes).
func (c *CalloutConfig) Default() {
	c.MaxTTL.Duration = cmp.Or(c.MaxTTL.Duration, time.Hour)
	c.KubeQPS, c.KubeBurst = cmp.Or(c.KubeQPS, 50), cmp.Or(c.KubeBurst, 100)
	c.Workers = cmp.Or(c.Workers, 16)
	c.AnswerTimeout.Duration = cmp.Or(c.AnswerTimeout.Duration, 1500*time.Millisecond)
	c.PerHostQPS, c.PerHostBurst = cmp.Or(c.PerHostQPS, 5), cmp.Or(c.PerHostBurst, 20)
	c.CacheTTL.Duration = cmp.Or(c.CacheTTL.Duration, time.Minute)
	c.MaxSubscriptions = cmp.Or(c.MaxSubscriptions, natscallout.DefaultSubscriptions)
}

// loadTrust reads the NATS trust secret (nil, nil without a file: a NATS
// without auth, for tests and benchmarks).
func loadTrust(file string) (*natsaccounts.Trust, error) {
	if file == "" {
		return nil, nil
	}
	secret, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("queue: NATS trust secret: %w", err)
	}
	t, err := natsaccounts.Derive(secret)
	if err != nil {
		return nil, fmt.Errorf("queue: NATS trust secret in %s: %w", file, err)
	}
	return t, nil
}

// natsAuthOptions are the queue's own credentials: its user in RUNPLANE,
// derived from the trust secret (a Secret in runplane's namespace, never
// in a tenant's).
func natsAuthOptions(trust *natsaccounts.Trust) ([]nats.Option, error) {
	if trust == nil {
		return nil, nil
	}
	userJWT, seed, err := trust.QueueCreds()
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	return []nats.Option{nats.UserJWTAndSeed(userJWT, string(seed))}, nil
}

// WorkerPullThreshold is how long a worker's pull may wait for its
// dispatches through its account's import: the sidecar's longest pull
// (-fetch-wait, 2 s by default) with room for a loaded machine. A longer
// pull's late messages are dropped and redelivered after the ack wait.
const WorkerPullThreshold = 30 * time.Second

// WorkerExports are what RUNPLANE exports to the worker accounts, for the
// layout of sc (natscallout.WorkerExports).
func WorkerExports(sc stream.Config) jwt.Exports {
	sc = sc.WithDefaults()
	subj := messages.Subjects{Prefix: sc.Prefix}
	return natscallout.WorkerExports(
		[]string{subj.Result("*", "*"), subj.Events("*", "*", "*"), subj.ChunkSubject("*", "*", "*", "*"), subj.Reply("*", "*") + ".>"},
		subj.Cancel("*", "*", "*"), WorkerPullThreshold)
}

// openResolver connects the queue's SYS user and pushes RUNPLANE's account
// with the exports of today's layout (the server's preloaded copy may be
// older), so the callout can push each worker's account.
func openResolver(ctx context.Context, log *slog.Logger, url string, tlsOpts []nats.Option, trust *natsaccounts.Trust, sc stream.Config) (*natsaccounts.Resolver, func(), error) {
	userJWT, seed, err := trust.SystemCreds()
	if err != nil {
		return nil, nil, fmt.Errorf("queue: %w", err)
	}
	opts := append(natsconn.Options("runplane-queue-resolver", 250*time.Millisecond, log.With("conn", "resolver")), nats.UserJWTAndSeed(userJWT, string(seed)))
	sys, err := nats.Connect(url, append(opts, tlsOpts...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("queue: connect the NATS system user: %w", err)
	}
	r := &natsaccounts.Resolver{Conn: sys, Trust: trust}
	rp, err := trust.RunplaneAccountJWT(WorkerExports(sc))
	if err == nil {
		err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return r.Push(pctx, rp) == nil, nil
		})
	}
	if err != nil {
		sys.Close()
		return nil, nil, fmt.Errorf("queue: pushing the RUNPLANE account: %w", err)
	}
	return r, sys.Close, nil
}

// workerMaxPayload is the largest message a worker's sidecar publishes,
// the default of CalloutConfig.MaxPayload: a result, at most the results
// stream's max message size (-result-max-size, which every dispatch
// tells the sidecar; a bigger body goes to the object bucket), or a chunk
// of a streamed answer, at most the chunks stream's. Object chunks are
// half a result at most (objects.ChunkSize), events and JetStream calls
// small.
func workerMaxPayload(sc stream.Config) int64 {
	sc = sc.WithDefaults()
	return int64(max(sc.ResultMaxMsgSize, sc.MaxChunkBytes))
}

// newCallout builds the callout Runnable on the queue's connection;
// consumers creates each admitted worker's dispatch consumer and accounts
// its account.
func newCallout(cfg CalloutConfig, nc *nats.Conn, kube kubernetes.Interface, trust *natsaccounts.Trust, accounts natscallout.Accounts, consumers WorkerConsumers, buckets NamespaceBuckets, chunks NamespaceChunks, layout natscallout.Layout, reg prometheus.Registerer, log *slog.Logger) (*callout, error) {
	if kube == nil {
		return nil, fmt.Errorf("queue: the NATS auth callout needs a Kubernetes config")
	}
	cfg.Default()
	return &callout{
		nc: nc,
		responder: &natscallout.Responder{
			Trust: trust,
			// The review is cached; the worker's consumer is ensured on every
			// connect (an inactive one is deleted by the server), so the
			// cache sits inside admitWorker.
			Auth: &admitWorker{
				Authenticator: natscallout.NewCached(&natscallout.KubeAuthenticator{Client: kube, Audience: natscallout.Audience},
					natscallout.CacheOptions{TTL: cfg.CacheTTL.Duration}),
				Consumers: consumers,
				Buckets:   buckets,
				Chunks:    chunks,
				Log:       log.With("component", "nats-callout"),
			},
			Layout:   layout,
			Accounts: accounts,
			MaxTTL:   cfg.MaxTTL.Duration,
			Limits:   natscallout.Limits{Subscriptions: cfg.MaxSubscriptions, Payload: cfg.MaxPayload},
			Clock:    clock.RealClock{},
		},
		serve: natscallout.ServeOptions{Workers: cfg.Workers, AnswerTimeout: cfg.AnswerTimeout.Duration,
			PerHostQPS: cfg.PerHostQPS, PerHostBurst: cfg.PerHostBurst},
		metrics: natscallout.NewMetrics(reg),
		log:     log.With("component", "nats-callout"),
	}, nil
}

// WorkerConsumers creates a worker's dispatch consumer (stream.Store).
type WorkerConsumers interface {
	EnsureWorkerConsumer(ctx context.Context, ns, pool, worker string) error
}

// admitWorker is the callout's Authenticator: the wrapped one says who the
// client is; admitWorker then checks that the identity's names are single
// subject tokens (a Pod name with '.' would reach into other subjects) and
// creates the worker's consumer with the queue's own connection before the
// worker is admitted. A worker is granted only to bind to that consumer,
// never to create or change one. A failure refuses the connection; the
// sidecar reconnects and the callout tries again.
type admitWorker struct {
	natscallout.Authenticator
	Consumers WorkerConsumers
	// Buckets makes the worker's namespace's Object Store bucket (nil:
	// none). A bucket that cannot be made never refuses the worker: only
	// its namespace's big payloads and results fail (ensureBucket).
	Buckets NamespaceBuckets
	// Chunks makes the worker's namespace's chunks stream (nil: none);
	// likewise never a refusal (ensureChunks).
	Chunks NamespaceChunks
	Log    *slog.Logger
}

// Authenticate implements natscallout.Authenticator.
func (a *admitWorker) Authenticate(ctx context.Context, token string) (natscallout.Identity, error) {
	id, err := a.Authenticator.Authenticate(ctx, token)
	if err != nil {
		return id, err
	}
	for _, f := range []struct{ kind, v string }{{"namespace", id.Namespace}, {"pool", id.Pool}, {"worker", id.Worker}} {
		if err := messages.ValidateToken(f.kind, f.v); err != nil {
			return id, fmt.Errorf("identity %s: %w", id.Name, err)
		}
	}
	if err := a.Consumers.EnsureWorkerConsumer(ctx, id.Namespace, id.Pool, id.Worker); err != nil {
		return id, fmt.Errorf("identity %s: %w", id.Name, err)
	}
	a.ensureBucket(ctx, id)
	a.ensureChunks(ctx, id)
	return id, nil
}

// callout serves the auth callout on every replica: requests are shared
// by the replicas' queue group, so it needs no leader.
type callout struct {
	nc        *nats.Conn
	responder *natscallout.Responder
	serve     natscallout.ServeOptions
	metrics   *natscallout.Metrics
	log       *slog.Logger
}

// Start implements manager.Runnable.
func (c *callout) Start(ctx context.Context) error {
	c.log.Info("serving the NATS auth callout", "account", c.responder.Trust.Runplane.Pub)
	return natscallout.Serve(ctx, c.nc, c.responder, c.metrics, c.log, c.serve)
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (c *callout) NeedLeaderElection() bool { return false }

func readSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// limitedClient is a clientset of its own on a copy of rc, with its own
// client-side rate limit: parts of the queue that must not starve each
// other each get one.
func limitedClient(rc *rest.Config, qps float32, burst int) (kubernetes.Interface, error) {
	c := rest.CopyConfig(rc)
	c.QPS, c.Burst, c.RateLimiter = qps, burst, nil
	client, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return client, nil
}
