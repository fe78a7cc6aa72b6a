package api

// Environment contract between the webhook (which injects it) and the
// containers of a serverless worker Pod.
//
// Main containers get the framework contract: the Runplane* names and the
// seed's Serverless* names, with the same values. The worker sidecar gets the
// framework contract plus the NATS settings; NATS credentials are mounted
// into the sidecar only, never into a main container.
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
	// EnvNATSCredentialsDir is a directory holding the NATS credentials Secret:
	// a file "creds" (NATS user JWT + seed), or "token", or "user" and "password".
	EnvNATSCredentialsDir = "RUNPLANE_NATS_CREDENTIALS_DIR"
	// EnvSidecarHTTPAddr is where the sidecar serves /livez, /readyz and /metrics.
	EnvSidecarHTTPAddr = "RUNPLANE_SIDECAR_HTTP_ADDR"
)

// Names of the objects and mounts of a worker Pod.
const (
	// NATSCredentialsSecret is the Secret, kept in every namespace that runs
	// pool Pods by the controller, that the sidecar mounts.
	NATSCredentialsSecret   = "runplane-nats-credentials"
	NATSCredentialsMountDir = "/var/run/runplane/nats"
	SidecarContainerName    = "runplane-worker"
	SidecarHTTPPort         = 8091
	SSHContainerName        = "runplane-ssh"
	SSHPort                 = 2222
	SSHAuthorizedKeysDir    = "/etc/runplane/ssh"
	SSHAuthorizedKeysKey    = "authorized_keys"
	SSHHostKeyDir           = "/var/run/runplane/ssh-host"
)
