package config

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/internal/objects"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/ingress"
	"github.com/runplane/runplane/sidecar"
)

// Default fills every zero field with its default: the one place the
// queue's settings get them.
func (c *QueueConfiguration) Default() {
	c.Namespace = cmp.Or(c.Namespace, api.DefaultNamespace)
	if c.LeaderElection.LeaderElect == nil {
		c.LeaderElection.LeaderElect = ptr.To(len(c.StaticPools) == 0)
	}
	c.LeaderElection.Default()
	c.Listen = cmp.Or(c.Listen, queue.DefaultListen)
	c.Metrics.BindAddress = cmp.Or(c.Metrics.BindAddress, ":8443")
	c.Tracing.SampleRatio = cmp.Or(c.Tracing.SampleRatio, 1)

	n := &c.NATS
	n.NATS.Default()
	n.Bootstrap.ResolverDir = cmp.Or(n.Bootstrap.ResolverDir, "/data/jwt")
	configfile.OrDuration(&n.Bootstrap.TLSCheckInterval, time.Minute)
	n.Bootstrap.Dir = cmp.Or(n.Bootstrap.Dir, "/var/run/runplane/bootstrap")

	// The stream's own defaults; unbounded sizes shown as -1.
	c.Stream = c.Stream.WithDefaults()
	c.Stream.MaxBytes, c.Stream.RecordsMaxBytes = cmp.Or(c.Stream.MaxBytes, -1), cmp.Or(c.Stream.RecordsMaxBytes, -1)
	c.Limits.Default()
	c.Workers.Default()
	// The file knows the sidecars' interval (their default unless told):
	// the heartbeat timeout is checked against it.
	configfile.OrDuration(&c.Workers.HeartbeatInterval, sidecar.DefaultHeartbeatInterval)
	c.MaxPayloadBytes = cmp.Or(c.MaxPayloadBytes, objects.DefaultMaxPayloadBytes)

	c.CallerAuth.Default()

	c.Callbacks.KeyDir = cmp.Or(c.Callbacks.KeyDir, "/var/run/runplane/bootstrap")
	c.Callbacks.Delivery.Default()
}

// Validate refuses settings the queue cannot run with, each error naming
// its key.
func (c *QueueConfiguration) Validate() error {
	var errs []error
	bad := func(key string, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	if *c.LeaderElection.LeaderElect && len(c.StaticPools) > 0 {
		bad("leaderElection.leaderElect", "needs Kubernetes; staticPools run without it")
	}
	if err := c.LeaderElection.Validate("leaderElection"); err != nil {
		errs = append(errs, err)
	}
	if len(c.StaticPools) > 0 && !c.InsecureDisableCallerAuth && !c.DisableIngress {
		bad("staticPools", "nothing authenticates callers without Kubernetes: set insecureDisableCallerAuth (insecure)")
	}
	if err := c.Metrics.Validate("metrics"); err != nil {
		errs = append(errs, err)
	}
	if r := c.Tracing.SampleRatio; r <= 0 || r > 1 {
		bad("tracing.sampleRatio", "%v: want 0 < ratio ≤ 1", r)
	}
	for key, v := range map[string]float32{"nats.callout.kubeQPS": c.NATS.Callout.KubeQPS, "nats.callout.perHostQPS": c.NATS.Callout.PerHostQPS,
		"callerAuth.kubeQPS": c.CallerAuth.KubeQPS, "callerAuth.tokenReviewQPS": c.CallerAuth.TokenReviewQPS, "callerAuth.accessReviewQPS": c.CallerAuth.AccessReviewQPS} {
		if v <= 0 {
			bad(key, "%v: want > 0", v)
		}
	}
	if c.Stream.ResultMaxMsgSize < 1 {
		bad("stream.resultMaxSize", "%d: want a positive number of bytes", c.Stream.ResultMaxMsgSize)
	} else if err := c.Stream.Validate(); err != nil {
		bad("stream", "%w", err)
	}
	if err := c.validateBodyBudgets(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Workers.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("workers.%w", err))
	}
	if c.NATS.Bootstrap.TLSSecret != "" && len(c.NATS.Bootstrap.TLSDNSNames) == 0 {
		bad("nats.bootstrap.tlsDNSNames", "needed with nats.bootstrap.tlsSecret")
	}
	if c.NATS.Bootstrap.TLSSecret != "" && c.NATS.CAFile != "" {
		bad("nats.caFile", "nats.bootstrap.tlsSecret keeps the CA file itself: drop nats.caFile")
	}
	return errors.Join(errs...)
}

// validateBodyBudgets refuses body budgets no request at the body limit
// could fit in (it would get 429 forever, not 413), and a namespace's
// share above the replica's budget or unbounded under a bounded one (one
// namespace could take it all).
func (c *QueueConfiguration) validateBodyBudgets() error {
	ns, replica := c.Limits.NamespaceMaxBodyBytes, c.Limits.ReplicaMaxBodyBytes
	if largest := ingress.BodyLimit(c.MaxPayloadBytes); ns > 0 && ns < largest {
		return fmt.Errorf("limits.namespaceMaxBodyBytes: %d is below the largest request body, %d (maxPayloadBytes %d in base64 plus "+
			"the envelope): raise it or lower maxPayloadBytes", ns, largest, c.MaxPayloadBytes)
	}
	if replica > 0 && (ns < 0 || ns > replica) {
		return fmt.Errorf("limits.namespaceMaxBodyBytes: %d: want at most limits.replicaMaxBodyBytes (%d), a namespace's share of it", ns, replica)
	}
	return nil
}
