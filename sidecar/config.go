package sidecar

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/metricsauth"
	"github.com/runplane/runplane/internal/natstls"
)

// Config is everything a sidecar needs. ConfigFromEnv fills the contract
// part from the env the webhook injects; the tuning fields have defaults
// (see Defaults) and are flags of cmd/runplane-sidecar.
type Config struct {
	Pool            string
	WorkerName      string
	WorkerNamespace string

	FrameworkSocket string
	InvokePath      string
	HealthPath      string
	// Concurrency is how many invocations run at once (MaxAckPending of the
	// dispatch consumer).
	Concurrency int

	NATSURL       string
	SubjectPrefix string
	StreamName    string
	// NATSTokenFile holds the sidecar's NATS credential, the projected
	// ServiceAccount token bound to its Pod; it is re-read on every
	// (re)connect, so a rotated token is used once the old NATS user
	// expires. ConfigFromEnv defaults it to api.NATSTokenFile; empty (tests
	// on a NATS without auth) presents no credential.
	NATSTokenFile string
	// JSAPIPrefix is the JetStream API prefix (api.EnvNATSJSAPIPrefix; ""
	// is $JS.API).
	JSAPIPrefix string
	// NATSCA (PEM, api.EnvNATSCA) and NATSServerName
	// (api.EnvNATSServerName): the sidecar speaks TLS first and verifies
	// the server's certificate against NATSCA and NATSServerName before it
	// writes anything, its token least of all. Both empty: a NATS without
	// TLS (tests).
	NATSCA         []byte
	NATSServerName string

	// HTTPAddr serves /livez and /readyz (the kubelet's probes).
	HTTPAddr string
	// MetricsAddr serves /metrics, on a loopback address only: the Pod is
	// the tenant's, so nothing here can authenticate a scraper, and a
	// scraper's token must not be sent to it (internal/metricsauth.Loopback).
	// Read it through kubectl port-forward. Empty: not served.
	MetricsAddr string

	// HeartbeatInterval is how often a heartbeat Event is published.
	HeartbeatInterval time.Duration
	// ProbeInterval is how often the framework's health is checked.
	ProbeInterval time.Duration
	// AckWait is the dispatch consumer's ack wait; in-progress acks are sent
	// every AckWait/3 while an invocation runs.
	AckWait time.Duration
	// InactiveThreshold lets the server delete the durable consumer of a
	// worker that is gone for good.
	InactiveThreshold time.Duration
	// CreateConsumer: the sidecar creates its dispatch consumer (with
	// AckWait, InactiveThreshold and MaxAckPending = Concurrency) instead
	// of binding to the one the queue's auth callout creates. Only for a
	// NATS without the callout (tests, local runs), where it is also the
	// default when NATSTokenFile is empty; under the callout the server
	// refuses it (workers may not create consumers).
	CreateConsumer bool
	// ShutdownGrace bounds how long in-flight invocations may finish after
	// the sidecar is told to stop; the rest end as failed. ConfigFromEnv
	// reads it from api.EnvShutdownGraceSeconds, which the webhook derives
	// from the Pod's terminationGracePeriodSeconds.
	ShutdownGrace time.Duration
	// FetchWait is how long one pull request waits for a dispatch. A drain
	// waits for the outstanding pull to end, so keep it short.
	FetchWait time.Duration
	// StateDir keeps the framework's outcome of each execution until its
	// result is stored (outcomes.go): a sidecar restarted after the
	// framework answered publishes it instead of running it again. Empty:
	// outcomes are kept in memory only.
	StateDir string

	Logger *slog.Logger

	// TracerProvider records the sidecar's invoke spans (nil: none; a
	// Dispatch's trace context still reaches the framework).
	TracerProvider trace.TracerProvider
}

// Defaults for the tuning fields.
const (
	DefaultHeartbeatInterval = 5 * time.Second
	DefaultProbeInterval     = time.Second
	DefaultAckWait           = 30 * time.Second
	DefaultInactiveThreshold = 10 * time.Minute
	DefaultShutdownGrace     = 25 * time.Second
	DefaultFetchWait         = 2 * time.Second
)

// ConfigFromEnv reads the env contract of api/env.go (the RUNPLANE_* names,
// with the seed's SERVERLESS_* names as fallbacks for the framework
// contract). getenv is os.Getenv in the binary.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Config{
		Pool:            getenv(api.EnvPool),
		WorkerName:      first(getenv(api.EnvWorkerName), getenv(api.EnvSeedWorkerName)),
		WorkerNamespace: first(getenv(api.EnvWorkerNamespace), getenv(api.EnvSeedWorkerNamespace)),
		FrameworkSocket: first(getenv(api.EnvFrameworkSocket), getenv(api.EnvSeedSocketPath), api.DefaultFrameworkSocket),
		InvokePath:      first(getenv(api.EnvFrameworkInvokePath), getenv(api.EnvSeedInvokePath), api.DefaultFrameworkInvokePath),
		HealthPath:      first(getenv(api.EnvFrameworkHealthPath), getenv(api.EnvSeedHealthPath), api.DefaultFrameworkHealthPath),
		NATSURL:         getenv(api.EnvNATSURL),
		SubjectPrefix:   first(getenv(api.EnvSubjectPrefix), api.DefaultSubjectPrefix),
		StreamName:      first(getenv(api.EnvStreamName), api.DefaultStreamName),
		NATSTokenFile:   first(getenv(api.EnvNATSTokenFile), api.NATSTokenFile),
		JSAPIPrefix:     getenv(api.EnvNATSJSAPIPrefix),
		NATSCA:          []byte(getenv(api.EnvNATSCA)),
		NATSServerName:  getenv(api.EnvNATSServerName),
		StateDir:        getenv(api.EnvWorkerStateDir),
		HTTPAddr:        first(getenv(api.EnvSidecarHTTPAddr), ":"+strconv.Itoa(api.SidecarHTTPPort)),
		MetricsAddr:     first(getenv(api.EnvSidecarMetricsAddr), "127.0.0.1:"+strconv.Itoa(api.SidecarMetricsPort)),
		Concurrency:     1,
	}
	if c.Pool == "" {
		c.Pool = getenv(api.EnvSeedRequestID)
	}
	var errs []error
	if v := getenv(api.EnvConcurrency); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("%s: %q is not a positive integer", api.EnvConcurrency, v))
		} else {
			c.Concurrency = n
		}
	}
	for _, req := range []struct{ name, val string }{
		{api.EnvPool, c.Pool},
		{api.EnvWorkerName, c.WorkerName},
		{api.EnvWorkerNamespace, c.WorkerNamespace},
		{api.EnvNATSURL, c.NATSURL},
	} {
		if req.val == "" {
			errs = append(errs, fmt.Errorf("%s must be set", req.name))
		}
	}
	if v := getenv(api.EnvShutdownGraceSeconds); v != "" {
		// The webhook sizes it from the Pod's terminationGracePeriodSeconds.
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("%s: %q is not a positive integer", api.EnvShutdownGraceSeconds, v))
		} else {
			c.ShutdownGrace = time.Duration(n) * time.Second
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("sidecar env: %w", err)
	}
	return c, nil
}

func (c Config) natsTLS() natstls.Client {
	return natstls.Client{CA: c.NATSCA, ServerName: c.NATSServerName}
}

func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// withDefaults fills unset tuning fields and validates the rest.
func (c Config) withDefaults() (Config, error) {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = DefaultProbeInterval
	}
	if c.AckWait <= 0 {
		c.AckWait = DefaultAckWait
	}
	if c.InactiveThreshold <= 0 {
		c.InactiveThreshold = DefaultInactiveThreshold
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.FetchWait <= 0 {
		c.FetchWait = DefaultFetchWait
	}
	if c.InvokePath == "" {
		c.InvokePath = framework.DefaultInvokePath
	}
	if c.HealthPath == "" {
		c.HealthPath = framework.DefaultHealthPath
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = api.DefaultSubjectPrefix
	}
	if c.StreamName == "" {
		c.StreamName = api.DefaultStreamName
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	var errs []error
	if err := messages.ValidateToken(api.EnvPool, c.Pool); err != nil {
		errs = append(errs, err)
	}
	if err := messages.ValidateToken(api.EnvWorkerName, c.WorkerName); err != nil {
		errs = append(errs, err)
	}
	if c.WorkerNamespace == "" {
		errs = append(errs, fmt.Errorf("%s must be set", api.EnvWorkerNamespace))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("%s: %d is not a positive integer", api.EnvConcurrency, c.Concurrency))
	}
	if c.NATSURL == "" {
		errs = append(errs, fmt.Errorf("%s must be set", api.EnvNATSURL))
	}
	if _, err := c.natsTLS().Options(); err != nil {
		errs = append(errs, fmt.Errorf("%s, %s: %w", api.EnvNATSCA, api.EnvNATSServerName, err))
	}
	if c.FrameworkSocket == "" {
		errs = append(errs, fmt.Errorf("%s must be set", api.EnvFrameworkSocket))
	}
	for _, p := range []struct{ name, val string }{{api.EnvFrameworkInvokePath, c.InvokePath}, {api.EnvFrameworkHealthPath, c.HealthPath}} {
		if !strings.HasPrefix(p.val, "/") {
			errs = append(errs, fmt.Errorf("%s: %q must start with /", p.name, p.val))
		}
	}
	if c.HTTPAddr == "" {
		errs = append(errs, fmt.Errorf("%s must be set", api.EnvSidecarHTTPAddr))
	} else if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		errs = append(errs, fmt.Errorf("%s: %q is not host:port: %w", api.EnvSidecarHTTPAddr, c.HTTPAddr, err))
	}
	if c.MetricsAddr != "" {
		if err := metricsauth.Loopback(c.MetricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", api.EnvSidecarMetricsAddr, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("sidecar config: %w", err)
	}
	return c, nil
}
