package mutate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
)

// Feature is one thing the webhook can do to a Pod. Features are listed in
// the runplane.io/injected annotation and label the admission metrics.
type Feature string

const (
	FeatureGPUSpec     Feature = "gpu-spec"
	FeatureStock       Feature = "stock"
	FeaturePool        Feature = "pool"
	FeatureSSH         Feature = "ssh"
	FeatureStorageGate Feature = "storage-gate"
)

// Features lists every feature in the order they are applied and recorded.
var Features = []Feature{FeatureGPUSpec, FeatureStock, FeaturePool, FeatureSSH, FeatureStorageGate}

// Names of what runplane adds to a Pod. The runplane- prefix is reserved
// (api.ReservedPrefix): an incoming container or volume with such a name
// must be exactly what runplane injects, else the Pod is denied.
const (
	PauseContainerName     = "pause"
	VolumeFrameworkSocket  = "runplane-framework-socket"
	VolumeNATSCredentials  = "runplane-nats-token"
	VolumeWorkerState      = "runplane-worker-state"
	VolumeSSHAuthorizedKey = "runplane-ssh-authorized-keys"
	VolumeSSHHostKey       = "runplane-ssh-host-key"
	VolumeSSHBinary        = "runplane-ssh-bin"
	// SSHInstallContainerName copies runplane-ssh into VolumeSSHBinary, from
	// where it runs in the main container of an SSH Pod (as its launcher).
	SSHInstallContainerName = "runplane-ssh-install"
	// SSHBinaryDir is where VolumeSSHBinary is mounted.
	SSHBinaryDir   = "/var/run/runplane/ssh-bin"
	SidecarCommand = "runplane-sidecar"
	SSHCommand     = "runplane-ssh"
	// DefaultContainerAnnotation picks the main container that gets a GPU
	// spec's resources (kubectl uses the same annotation).
	DefaultContainerAnnotation = "kubectl.kubernetes.io/default-container"
)

// Config is the platform side of an injection: what the chart or make dev
// configures, the same for every Pod.
type Config struct {
	// Image is the runplane image holding every binary (runplane-sidecar,
	// runplane-ssh, ...).
	Image           string            `json:"image"`
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// PauseImage is the container image of stock placeholders.
	PauseImage string `json:"pauseImage"`
	NATSURL    string `json:"natsURL"`
	// NATSServerName is the name NATS's certificate must carry: with it,
	// every worker sidecar gets it and the CA bundle (Mutator.NATSCA) and
	// speaks verified TLS; empty: a NATS without TLS (tests).
	NATSServerName string `json:"natsServerName,omitempty"`
	SubjectPrefix  string `json:"subjectPrefix"`
	StreamName     string `json:"streamName"`
	// StockNamespaces, when set, are the only namespaces where stock
	// placeholders may be created: a placeholder in a tenant namespace
	// would hold GPUs as stock (and get runplane-stock) on the tenant's say.
	StockNamespaces []string `json:"stockNamespaces,omitempty"`
	// DRAStockNamespaces are tenant namespaces that may also hold
	// placeholders, of DRA specs only: a DRA placeholder's claim can be
	// handed only to a GPU Pod of its own namespace, so the platform keeps
	// a tenant's DRA stock there (chart stock.pools[].namespaces). An
	// extended-resource placeholder there would be shared stock on the
	// tenant's say.
	DRAStockNamespaces []string `json:"draStockNamespaces,omitempty"`
	// Resources are the requests and limits of the injected containers
	// (DefaultSidecarResources in DefaultConfig); Pods override the
	// worker's with api.AnnotationWorkerResources. A container missing
	// here gets none.
	Resources SidecarResources `json:"resources,omitempty"`
	// WorkloadPriorityClasses are the PriorityClasses a GPU Pod may name
	// (priority tiers, e.g. runplane-workload-high, runplane-batch); a GPU
	// Pod that names none gets runplane-workload, which is always allowed.
	WorkloadPriorityClasses []string `json:"workloadPriorityClasses,omitempty"`
}

// stockAllowed refuses a placeholder of spec in namespace ns unless ns is
// a stock namespace (any spec; every namespace when none is set) or a DRA
// stock namespace and spec a DRA spec.
func (c Config) stockAllowed(ns string, spec catalog.Spec) error {
	switch {
	case len(c.StockNamespaces) == 0 || slices.Contains(c.StockNamespaces, ns):
		return nil
	case slices.Contains(c.DRAStockNamespaces, ns) && spec.IsDRA():
		return nil
	case slices.Contains(c.DRAStockNamespaces, ns):
		return invalidLabel(api.LabelStock, "namespace %s holds stock of DRA specs only, and %s is not one: its placeholders may only be created in namespace(s) %s (the platform's)",
			Quote(ns), Quote(spec.Name), strings.Join(c.StockNamespaces, ", "))
	}
	return invalidLabel(api.LabelStock, "stock placeholders may only be created in namespace(s) %s (the platform's), not in %s",
		strings.Join(c.StockNamespaces, ", "), Quote(ns))
}

// AllowedWorkloadPriorityClasses is the set GPU Pods may name,
// runplane-workload first.
func (c Config) AllowedWorkloadPriorityClasses() []string {
	out := []string{api.PriorityClassWorkload}
	for _, n := range c.WorkloadPriorityClasses {
		if n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// DefaultConfig returns the defaults of everything but NATSURL and Image.
func DefaultConfig() Config {
	return Config{
		PauseImage:              api.DefaultPauseImage,
		SubjectPrefix:           api.DefaultSubjectPrefix,
		StreamName:              api.DefaultStreamName,
		WorkloadPriorityClasses: []string{api.PriorityClassWorkloadHigh, api.PriorityClassBatch},
		Resources:               DefaultSidecarResources(),
	}
}

// Validate reports a missing or malformed setting.
func (c Config) Validate() error {
	switch {
	case c.Image == "":
		return errors.New("injection config: image (the runplane image) must be set")
	case c.PauseImage == "":
		return errors.New("injection config: pause image must be set")
	case c.NATSURL == "":
		return errors.New("injection config: NATS URL must be set")
	case c.SubjectPrefix == "" || c.StreamName == "":
		return errors.New("injection config: subject prefix and stream name must be set")
	case slices.Contains(c.WorkloadPriorityClasses, api.PriorityClassStock):
		return fmt.Errorf("injection config: workload PriorityClasses must not include %s (placeholders' class)", api.PriorityClassStock)
	case len(c.DRAStockNamespaces) > 0 && len(c.StockNamespaces) == 0:
		// An empty stockNamespaces admits placeholders of every spec in
		// every namespace, which would make draStockNamespaces' limit
		// (DRA specs only there) meaningless.
		return errors.New("injection config: draStockNamespaces needs stockNamespaces (the platform's stock namespace): without it placeholders of any spec are admitted anywhere")
	}
	if err := c.Resources.Validate(); err != nil {
		return fmt.Errorf("injection config: %w", err)
	}
	switch c.ImagePullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("injection config: image pull policy must be Always, IfNotPresent or Never, got %q", c.ImagePullPolicy)
	}
	return nil
}

// PVCGetter finds a PersistentVolumeClaim; it returns nil, nil when the
// claim does not exist.
type PVCGetter interface {
	GetPVC(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error)
}

// PriorityClassGetter finds a PriorityClass; nil, nil when it does not exist.
type PriorityClassGetter interface {
	GetPriorityClass(ctx context.Context, name string) (*schedulingv1.PriorityClass, error)
}

// NamespaceGetter finds a Namespace; nil, nil when it does not exist.
type NamespaceGetter interface {
	GetNamespace(ctx context.Context, name string) (*corev1.Namespace, error)
}

// Mutator applies the features a Pod's labels ask for.
type Mutator struct {
	Config          Config
	Catalog         func() catalog.Catalog
	PVCs            PVCGetter
	PriorityClasses PriorityClassGetter
	// Namespaces is read only for a GPU Pod naming a tier above
	// runplane-workload (api.AnnotationPriorityTiers).
	Namespaces NamespaceGetter
	// NATSCA is the PEM CA bundle of NATS (public certificates only) that
	// a pool Pod's sidecar verifies the server with, read at each
	// admission: a Pod gets the bundle of its creation, and a renewed CA
	// is certified by the old one (internal/pki), so older Pods keep
	// verifying. Needed with Config.NATSServerName; an error fails the
	// admission (the ReplicaSet retries).
	NATSCA func() ([]byte, error)
}

// Result is a mutated Pod and what was applied to it.
type Result struct {
	Pod      *corev1.Pod
	Features []Feature
}

// plan is what a Pod's labels ask for under the current configuration.
type plan struct {
	opts               Options
	stockSpec, gpuSpec catalog.Spec
	hash               string
}

func (m *Mutator) plan(labels, annotations map[string]string) (*plan, error) {
	opts, err := ParseOptions(labels, annotations)
	if err != nil {
		return nil, err
	}
	cat := m.Catalog()
	p := &plan{opts: opts}
	hashed := struct {
		Config  Config        `json:"config"`
		Options Options       `json:"options"`
		Specs   []catalogSpec `json:"specs,omitempty"`
	}{Config: m.Config, Options: opts}
	if opts.Stock != "" {
		if p.stockSpec, err = cat.Lookup(api.LabelStock, opts.Stock); err != nil {
			return nil, err
		}
		hashed.Specs = append(hashed.Specs, catalogSpec{p.stockSpec})
	}
	if opts.GPUSpec != "" {
		if p.gpuSpec, err = cat.Lookup(api.LabelGPUSpec, opts.GPUSpec); err != nil {
			return nil, err
		}
		hashed.Specs = append(hashed.Specs, catalogSpec{p.gpuSpec})
	}
	if p.hash, err = configHash(hashed); err != nil {
		return nil, err
	}
	return p, nil
}

// Admission is what the caller knows about an admission request beyond
// the Pod.
type Admission struct {
	// Namespace the Pod is created in (the Pod itself may not carry it yet).
	Namespace string
	// RunplaneOwn says that the Pod is one of runplane's own (prepare Jobs,
	// accessors), which mount claims that are not prepared yet by design:
	// it is never storage-gated. The caller decides it from the requester's
	// identity, never from anything the Pod carries.
	RunplaneOwn bool
}

// Mutate is MutateAdmission of an ordinary Pod created in namespace.
func (m *Mutator) Mutate(ctx context.Context, pod *corev1.Pod, namespace string) (*Result, error) {
	return m.MutateAdmission(ctx, pod, Admission{Namespace: namespace})
}

// MutateAdmission returns a mutated copy of pod. Nothing the Pod carries
// makes it skip work: the runplane.io/injected annotation only reports, and
// every call recomputes the whole injection from the labels, so a Pod that
// already carries exactly what runplane injects (a reinvocation) yields an
// equal Pod and an empty patch. Containers and volumes with reserved names
// (runplane-*) must be exactly runplane's; user containers may not reach
// runplane's credentials (CheckContainers). Errors that the user can fix
// are *InvalidError, *ConflictError, *ReservedError, *CredentialError or
// *catalog.UnknownSpecError (see IsDenial); others are failures to read
// cluster state.
func (m *Mutator) MutateAdmission(ctx context.Context, pod *corev1.Pod, a Admission) (*Result, error) {
	p, err := m.plan(pod.Labels, pod.Annotations)
	if err != nil {
		return nil, err
	}
	opts, stockSpec, gpuSpec, hash := p.opts, p.stockSpec, p.gpuSpec, p.hash
	if opts.Stock != "" {
		if err := m.Config.stockAllowed(a.Namespace, stockSpec); err != nil {
			return nil, err
		}
	}

	// The user's Pod without runplane's containers: what a first pass
	// sees. Those present are compared with what this pass injects.
	out := pod.DeepCopy()
	reserved, err := takeReserved(out)
	if err != nil {
		return nil, err
	}
	if opts.SSH {
		unwrapSSH(out)
	}
	for _, group := range []struct {
		field string
		cs    []corev1.Container
	}{{"spec.initContainers", out.Spec.InitContainers}, {"spec.containers", out.Spec.Containers},
		{"spec.ephemeralContainers", EphemeralAsContainers(out.Spec.EphemeralContainers)}} {
		if err := CheckContainers(out, group.field, group.cs); err != nil {
			return nil, err
		}
	}

	var features []Feature
	if opts.Stock != "" {
		if err := m.applyStock(ctx, out, stockSpec); err != nil {
			return nil, err
		}
		features = append(features, FeatureStock)
	}
	if opts.GPUSpec != "" {
		if err := m.applyGPU(ctx, out, gpuSpec, a.Namespace); err != nil {
			return nil, err
		}
		features = append(features, FeatureGPUSpec)
	}
	if opts.Pool != "" {
		if err := m.applyPool(out, opts); err != nil {
			return nil, err
		}
		features = append(features, FeaturePool)
	}
	if opts.SSH {
		if err := m.applySSH(out, opts); err != nil {
			return nil, err
		}
		features = append(features, FeatureSSH)
	}
	if opts.GPUSpec != "" {
		if err := fitSpecAroundSidecars(out, gpuSpec); err != nil {
			return nil, err
		}
	}
	if err := verifyReserved(pod, out, reserved); err != nil {
		return nil, err
	}
	if opts.Stock == "" && !a.RunplaneOwn {
		if _, err := m.applyStorageGate(ctx, out, a.Namespace); err != nil {
			return nil, err
		}
		if hasGate(out) {
			features = append(features, FeatureStorageGate)
		}
	}
	if len(features) > 0 {
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		out.Annotations[api.AnnotationInjected] = injectedValue(features, hash)
	}
	return &Result{Pod: out, Features: features}, nil
}

// IsDenial reports whether err is the user's to fix (bad label, annotation,
// unknown spec, conflicting Pod field) rather than a failure of the webhook.
func IsDenial(err error) bool {
	var inv *InvalidError
	var unk *catalog.UnknownSpecError
	var con *ConflictError
	var res *ReservedError
	var cred *CredentialError
	return errors.As(err, &inv) || errors.As(err, &unk) || errors.As(err, &con) || errors.As(err, &res) || errors.As(err, &cred)
}

// ConflictError says that the Pod sets a field runplane must set differently.
type ConflictError struct {
	Label  string // the label whose feature needs the field
	Field  string
	Reason string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("label %s: %s: %s", e.Label, e.Field, e.Reason)
}

// catalogSpec hashes a spec including its name (Spec.Name is not JSON).
type catalogSpec struct{ catalog.Spec }

func (s catalogSpec) MarshalJSON() ([]byte, error) {
	type plain catalog.Spec
	return json.Marshal(struct {
		Name string `json:"name"`
		plain
	}{s.Name, plain(s.Spec)})
}

func configHash(hashed any) (string, error) {
	b, err := json.Marshal(hashed)
	if err != nil {
		return "", fmt.Errorf("hashing injection config: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}

// injectedValue is "<feature>,<feature> hash=<16 hex>": readable by a human
// and stable for one injection config, so reinvocations compare equal.
func injectedValue(features []Feature, hash string) string {
	names := make([]string, len(features))
	for i, f := range features {
		names[i] = string(f)
	}
	return strings.Join(names, ",") + " hash=" + hash
}
