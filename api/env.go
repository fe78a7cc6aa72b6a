package api

// Environment contract between the webhook (which injects it) and the
// containers of a serverless worker Pod.
//
// Main containers get the framework contract: the Runplane* names and the
// seed's Serverless* names, with the same values. The worker sidecar gets the
// framework contract plus the NATS settings; its NATS credential (a
// projected ServiceAccount token bound to the Pod, audience
// NATSTokenAudience) is mounted into the sidecar only, never into a main
// container.
const (
	EnvPool                = "RUNPLANE_POOL"
	EnvWorkerName          = "RUNPLANE_WORKER_NAME"
	EnvWorkerNamespace     = "RUNPLANE_WORKER_NAMESPACE"
	EnvFrameworkSocket     = "RUNPLANE_FRAMEWORK_SOCKET"
	EnvFrameworkInvokePath = "RUNPLANE_FRAMEWORK_INVOKE_PATH"
	EnvFrameworkHealthPath = "RUNPLANE_FRAMEWORK_HEALTH_PATH"

	EnvSeedRequestID       = "SERVERLESS_REQUEST_ID"
	EnvSeedWorkerName      = "SERVERLESS_WORKER_NAME"
	EnvSeedWorkerNamespace = "SERVERLESS_WORKER_NAMESPACE"
	EnvSeedSocketPath      = "SERVERLESS_FRAMEWORK_SOCKET_PATH"
	EnvSeedInvokePath      = "SERVERLESS_FRAMEWORK_INVOKE_PATH"
	EnvSeedHealthPath      = "SERVERLESS_FRAMEWORK_HEALTH_PATH"

	// Sidecar only.
	EnvConcurrency   = "RUNPLANE_CONCURRENCY"
	EnvNATSURL       = "RUNPLANE_NATS_URL"
	EnvSubjectPrefix = "RUNPLANE_SUBJECT_PREFIX"
	EnvStreamName    = "RUNPLANE_STREAM_NAME"
	// EnvNATSTokenFile is the file holding the sidecar's NATS credential: the
	// projected ServiceAccount token (NATSTokenFile by default), re-read on
	// every (re)connect so the kubelet's rotation takes effect.
	EnvNATSTokenFile = "RUNPLANE_NATS_TOKEN_FILE"
	// EnvNATSJSAPIPrefix is the JetStream API prefix the sidecar uses
	// (WorkerJSAPIPrefix in runplane's NATS; unset: $JS.API, a NATS without
	// accounts).
	EnvNATSJSAPIPrefix = "RUNPLANE_NATS_JS_API_PREFIX"
	// EnvNATSCA holds the PEM CAs the sidecar verifies NATS's certificate
	// with (NATSCAConfigMap as the webhook read it), and EnvNATSServerName
	// the name that certificate must carry, whatever host the URL names:
	// the sidecar speaks TLS first and sends its token only to a server
	// that proved both. Unset: a NATS without TLS (tests).
	EnvNATSCA         = "RUNPLANE_NATS_CA"
	EnvNATSServerName = "RUNPLANE_NATS_SERVER_NAME"
	// EnvSidecarHTTPAddr is where the sidecar serves /livez and /readyz.
	EnvSidecarHTTPAddr = "RUNPLANE_SIDECAR_HTTP_ADDR"
	// EnvSidecarMetricsAddr is where the sidecar serves /metrics: a
	// loopback address only (default 127.0.0.1:SidecarMetricsPort; SECURITY.md,
	// "Metrics").
	EnvSidecarMetricsAddr = "RUNPLANE_SIDECAR_METRICS_ADDR"
	// EnvShutdownGraceSeconds is how long the sidecar lets running
	// invocations finish after SIGTERM: the Pod's
	// terminationGracePeriodSeconds less ShutdownMarginSeconds, so results
	// are published and the worker deregistered before the kubelet kills it.
	EnvShutdownGraceSeconds = "RUNPLANE_SHUTDOWN_GRACE_SECONDS"
	// EnvWorkerStateDir is the sidecar's own directory (an emptyDir, which
	// outlives a restart of the container): it keeps there the framework's
	// outcome of each execution until the result is stored.
	EnvWorkerStateDir = "RUNPLANE_WORKER_STATE_DIR"
)

// Termination of a worker Pod.
const (
	// TerminationMarginSeconds is added to the pool's timeout-seconds for
	// the Pod's terminationGracePeriodSeconds (unless the user set it):
	// room to hand back, publish the last results and deregister.
	TerminationMarginSeconds = 30
	// ShutdownMarginSeconds is what the sidecar keeps of the grace period
	// after running invocations had their time (EnvShutdownGraceSeconds).
	ShutdownMarginSeconds = 15
)

// Names of the objects and mounts of a worker Pod.
const (
	// NATSCredentialsSecret is the shared-token Secret older releases copied
	// into every namespace with pool Pods. Nothing creates it any more; the
	// webhook still refuses user containers that would read one.
	NATSCredentialsSecret = "runplane-nats-credentials"
	// NATSTokenAudience is the audience of a worker's NATS token: the auth
	// callout accepts no token minted for anything else, and no user
	// container may request a projected token for it.
	NATSTokenAudience = "nats.runplane.io"
	// NATSTokenExpirationSeconds is the lifetime the kubelet gives the
	// projected token (it rotates it at 80%); the NATS user the callout
	// issues expires with it, so the sidecar reconnects with the new one.
	NATSTokenExpirationSeconds = 3600
	// NATSCredentialsMountDir is where the sidecar's projected token volume
	// is mounted; NATSTokenFile is the token in it.
	NATSCredentialsMountDir = "/var/run/secrets/nats.runplane.io"
	NATSTokenPath           = "token"
	NATSTokenFile           = NATSCredentialsMountDir + "/" + NATSTokenPath
	SidecarContainerName    = "runplane-worker"
	WorkerStateDir          = "/var/run/runplane/worker-state"
	SidecarHTTPPort         = 8091
	SidecarMetricsPort      = 8092
	// SSHContainerName was the SSH sidecar's; the SSH server now runs in
	// the main container, and no container has this name.
	SSHContainerName     = "runplane-ssh"
	SSHPort              = 2222
	SSHAuthorizedKeysDir = "/etc/runplane/ssh"
	SSHAuthorizedKeysKey = "authorized_keys"
	SSHHostKeyDir        = "/var/run/runplane/ssh-host"
)

// WorkerJSAPIPrefix is the JetStream API prefix of a worker in runplane's
// NATS (jetstream.NewWithAPIPrefix): a worker's account has no JetStream,
// and imports from RUNPLANE exactly its consumer's and bucket's API
// subjects under this prefix. Under the plain $JS.API the server's own
// import of the JetStream API into every account would answer first
// ("JetStream not enabled for account").
const WorkerJSAPIPrefix = "$RP.JS.API"
