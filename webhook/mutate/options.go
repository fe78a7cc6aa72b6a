// Package mutate is the pure part of runplane's Pod admission: it reads the
// runplane labels and annotations of a Pod (DESIGN.md "The user surface") and
// returns the Pod runplane runs: a GPU workload, a stock placeholder, a
// serverless worker with its sidecar, an SSH box, or a Pod held by the
// storage gate. It never talks to the API server itself; the cluster state it
// needs (catalog, PVCs, PriorityClasses) comes through small interfaces, so
// the same code runs in the webhook, in tests and in benchmarks.
package mutate

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/poolpolicy"
)

// InvalidError says that a label or annotation has a value runplane cannot
// use. Its message names the key and what is allowed: it is what a kubectl
// user reads after "denied the request:".
type InvalidError struct {
	Kind   string // "label" or "annotation"
	Key    string
	Reason string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("%s %s: %s", e.Kind, e.Key, e.Reason)
}

func invalidLabel(key, format string, args ...any) error {
	return &InvalidError{Kind: "label", Key: key, Reason: fmt.Sprintf(format, args...)}
}

func invalidAnnotation(key, format string, args ...any) error {
	return &InvalidError{Kind: "annotation", Key: key, Reason: fmt.Sprintf(format, args...)}
}

// MaxConcurrency bounds runplane.io/concurrency: beyond it a single worker
// would hold more in-flight invocations than any framework we know serves.
const MaxConcurrency = 1024

// Framework is the framework socket contract of a worker Pod.
type Framework struct {
	Socket     string
	InvokePath string
	HealthPath string
}

// Options is what a Pod's runplane labels and annotations ask for.
type Options struct {
	GPUSpec     string // runplane.io/gpu-spec, "" when absent
	Stock       string // runplane.io/stock, "" when absent
	Pool        string // runplane.io/pool, "" when absent
	SSH         bool   // runplane.io/ssh: enabled
	SSHSecret   string // runplane.io/ssh-authorized-keys
	Framework   Framework
	Concurrency int
	// Execution is the pool's timeout and retry policy
	// (runplane.io/timeout-seconds, max-retries, retry-on, retry-backoff),
	// checked on pool Pods only.
	Execution poolpolicy.Execution
	// WorkerResources overrides the platform's requests and limits of the
	// runplane-worker sidecar.
	WorkerResources *corev1.ResourceRequirements `json:",omitempty"`
}

// ParseOptions reads and validates the runplane labels and annotations of a
// Pod. Every error is an *InvalidError naming the key and what is allowed.
func ParseOptions(labels, annotations map[string]string) (Options, error) {
	o := Options{
		Framework: Framework{
			Socket:     api.DefaultFrameworkSocket,
			InvokePath: api.DefaultFrameworkInvokePath,
			HealthPath: api.DefaultFrameworkHealthPath,
		},
		Concurrency: 1,
	}
	var err error
	if v, ok := labels[api.LabelGPUSpec]; ok {
		if o.GPUSpec, err = specName(api.LabelGPUSpec, v); err != nil {
			return Options{}, err
		}
	}
	if v, ok := labels[api.LabelStock]; ok {
		if o.Stock, err = specName(api.LabelStock, v); err != nil {
			return Options{}, err
		}
	}
	if v, ok := labels[api.LabelPool]; ok {
		if o.Pool, err = poolName(v); err != nil {
			return Options{}, err
		}
	}
	if v, ok := labels[api.LabelSSH]; ok {
		if v != api.SSHEnabled {
			return Options{}, invalidLabel(api.LabelSSH, "invalid value %s: the only allowed value is %q (remove the label to disable SSH)", Quote(v), api.SSHEnabled)
		}
		o.SSH = true
	}
	if v, ok := labels[api.LabelEgress]; ok && v != api.EgressRestricted {
		return Options{}, invalidLabel(api.LabelEgress, "invalid value %s: the only allowed value is %q", Quote(v), api.EgressRestricted)
	}
	if v, ok := annotations[api.AnnotationSSHAuthorizedKeys]; ok {
		if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
			return Options{}, invalidAnnotation(api.AnnotationSSHAuthorizedKeys, "invalid Secret name %s: %s", Quote(v), strings.Join(errs, "; "))
		}
		if Reserved(v) {
			return Options{}, invalidAnnotation(api.AnnotationSSHAuthorizedKeys, "names %s, one of runplane's Secrets (%s*): name a Secret of your own", Quote(v), api.ReservedPrefix)
		}
		o.SSHSecret = v
	}
	if o.SSH && o.SSHSecret == "" {
		return Options{}, invalidAnnotation(api.AnnotationSSHAuthorizedKeys,
			"missing: label %s=%s needs this annotation to name a Secret in the Pod's namespace with key %q holding the authorized keys",
			api.LabelSSH, api.SSHEnabled, api.SSHAuthorizedKeysKey)
	}
	if v, ok := annotations[api.AnnotationFrameworkSocket]; ok {
		if o.Framework.Socket, err = socketPath(v); err != nil {
			return Options{}, err
		}
	}
	if v, ok := annotations[api.AnnotationFrameworkInvokePath]; ok {
		if o.Framework.InvokePath, err = urlPath(api.AnnotationFrameworkInvokePath, v); err != nil {
			return Options{}, err
		}
	}
	if v, ok := annotations[api.AnnotationFrameworkHealthPath]; ok {
		if o.Framework.HealthPath, err = urlPath(api.AnnotationFrameworkHealthPath, v); err != nil {
			return Options{}, err
		}
	}
	if v, ok := annotations[api.AnnotationConcurrency]; ok {
		if o.Concurrency, err = concurrency(v); err != nil {
			return Options{}, err
		}
	}
	if o.Pool != "" {
		if o.Execution, err = poolpolicy.Parse(annotations); err != nil {
			var pe *poolpolicy.Error
			if errors.As(err, &pe) {
				return Options{}, invalidAnnotation(pe.Key, "invalid value %s: %s", Quote(pe.Value), pe.Allowed)
			}
			return Options{}, err
		}
	}
	if v, ok := annotations[api.AnnotationWorkerResources]; ok {
		rr, err := parseResourceOverride(api.AnnotationWorkerResources, v)
		if err != nil {
			return Options{}, err
		}
		o.WorkerResources = &rr
	}
	if _, ok := annotations[api.AnnotationSSHResources]; ok {
		return Options{}, invalidAnnotation(api.AnnotationSSHResources,
			"no longer applies: SSH sessions run inside the main container (runplane's launcher starts the SSH server in front of its command), under that container's requests and limits; remove it and size the main container")
	}
	if o.Stock != "" {
		for _, other := range []struct {
			set bool
			key string
		}{{o.GPUSpec != "", api.LabelGPUSpec}, {o.Pool != "", api.LabelPool}, {o.SSH, api.LabelSSH}} {
			if other.set {
				return Options{}, invalidLabel(api.LabelStock, "a stock placeholder cannot also carry label %s: a Pod is either a placeholder or a workload", other.key)
			}
		}
	}
	return o, nil
}

func specName(key, v string) (string, error) {
	if v == "" {
		return "", invalidLabel(key, "empty value: it must name a GPU spec of the catalog ConfigMap %s", api.CatalogConfigMap)
	}
	return v, nil
}

func poolName(v string) (string, error) {
	if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
		return "", invalidLabel(api.LabelPool, "invalid pool name %s: it must be a DNS label (lower-case letters, digits and '-', at most 63 characters): %s", Quote(v), strings.Join(errs, "; "))
	}
	if err := messages.ValidateToken("pool name", v); err != nil {
		return "", invalidLabel(api.LabelPool, "%v", err)
	}
	return v, nil
}

func socketPath(v string) (string, error) {
	dir := path.Dir(v)
	switch {
	case !path.IsAbs(v) || path.Clean(v) != v:
		return "", invalidAnnotation(api.AnnotationFrameworkSocket, "invalid path %s: it must be a clean absolute path such as %s", Quote(v), api.DefaultFrameworkSocket)
	case dir == "/" || strings.ContainsAny(v, " \t\r\n:") || len(v) > 100:
		// A unix socket path is limited to ~107 bytes, and the socket's
		// directory becomes a shared volume mount, so it must not be "/".
		return "", invalidAnnotation(api.AnnotationFrameworkSocket, "invalid path %s: it must be a file in a directory below / (the directory becomes a shared volume), without spaces or ':', at most 100 bytes, such as %s", Quote(v), api.DefaultFrameworkSocket)
	}
	return v, nil
}

var urlPathRE = regexp.MustCompile(`^/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*$`)

func urlPath(key, v string) (string, error) {
	if !urlPathRE.MatchString(v) || len(v) > 256 {
		return "", invalidAnnotation(key, "invalid HTTP path %s: it must start with '/' and hold only URL path characters (at most 256), such as %s", Quote(v), api.DefaultFrameworkInvokePath)
	}
	return v, nil
}

func concurrency(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxConcurrency || strconv.Itoa(n) != v {
		return 0, invalidAnnotation(api.AnnotationConcurrency, "invalid value %s: it must be an integer from 1 to %d (default 1)", Quote(v), MaxConcurrency)
	}
	return n, nil
}
