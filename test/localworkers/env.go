package localworkers

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/runplane/runplane/api"
)

// Local are the values that replace the in-cluster ones for one Pod run on
// this machine.
type Local struct {
	NATSURL       string
	NATSTokenFile string // empty: the variable is dropped
	// PlainJetStream drops the worker JetStream API prefix (a NATS without
	// runplane's accounts).
	PlainJetStream  bool
	Socket          string
	SidecarHTTPAddr string
	// StateDir stands in for the sidecar's emptyDir (its outcome journal);
	// empty: the variable is dropped (outcomes in memory only).
	StateDir string
}

// PodEnv builds the env of the sidecar and of the framework process of pod:
// the Pod's identity and contract as the webhook would inject it (taken
// from the injected containers when present, synthesized from the Pod's
// labels and annotations otherwise), with the NATS endpoint, socket and
// HTTP address replaced by local values. It returns "K=V" lists.
func PodEnv(pod *corev1.Pod, local Local) (sidecar, frameworkEnv []string, err error) {
	base := [][2]string{
		{api.EnvPool, pod.Labels[api.LabelPool]},
		{api.EnvWorkerName, pod.Name},
		{api.EnvWorkerNamespace, pod.Namespace},
	}
	if v := pod.Annotations[api.AnnotationConcurrency]; v != "" {
		base = append(base, [2]string{api.EnvConcurrency, v})
	}
	if v := pod.Annotations[api.AnnotationFrameworkInvokePath]; v != "" {
		base = append(base, [2]string{api.EnvFrameworkInvokePath, v})
	}
	if v := pod.Annotations[api.AnnotationFrameworkHealthPath]; v != "" {
		base = append(base, [2]string{api.EnvFrameworkHealthPath, v})
	}

	sc, main := injectedContainers(pod)
	scEnv := newEnvList(base)
	if sc != nil {
		vars, err := resolveEnv(pod, sc)
		if err != nil {
			return nil, nil, fmt.Errorf("sidecar container %s: %w", sc.Name, err)
		}
		scEnv.merge(vars)
	}
	scEnv.set(api.EnvNATSURL, local.NATSURL)
	scEnv.del(api.EnvNATSTokenFile)
	if local.NATSTokenFile != "" {
		scEnv.set(api.EnvNATSTokenFile, local.NATSTokenFile)
	}
	if local.PlainJetStream {
		scEnv.del(api.EnvNATSJSAPIPrefix)
	}
	scEnv.set(api.EnvFrameworkSocket, local.Socket)
	scEnv.set(api.EnvSeedSocketPath, local.Socket)
	scEnv.set(api.EnvSidecarHTTPAddr, local.SidecarHTTPAddr)
	// Many sidecars share this host's loopback: any free port.
	scEnv.set(api.EnvSidecarMetricsAddr, "127.0.0.1:0")
	scEnv.del(api.EnvWorkerStateDir)
	if local.StateDir != "" {
		scEnv.set(api.EnvWorkerStateDir, local.StateDir)
	}

	fwEnv := newEnvList(base)
	if main != nil {
		vars, err := resolveEnv(pod, main)
		if err != nil {
			return nil, nil, fmt.Errorf("container %s: %w", main.Name, err)
		}
		fwEnv.merge(vars)
	}
	// The framework never gets NATS settings, whatever the Pod says.
	for _, k := range []string{api.EnvNATSURL, api.EnvNATSTokenFile, api.EnvNATSJSAPIPrefix, api.EnvSubjectPrefix, api.EnvStreamName, api.EnvSidecarHTTPAddr, api.EnvSidecarMetricsAddr} {
		fwEnv.del(k)
	}
	fwEnv.set(api.EnvFrameworkSocket, local.Socket)
	fwEnv.set(api.EnvSeedSocketPath, local.Socket)
	return scEnv.list(), fwEnv.list(), nil
}

// injectedContainers finds the sidecar (the init container the webhook
// adds) and the main container that serves the framework.
func injectedContainers(pod *corev1.Pod) (sidecar, main *corev1.Container) {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == api.SidecarContainerName {
			sidecar = &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name == api.SidecarContainerName {
			sidecar = c
			continue
		}
		if main == nil || (hasEnv(c, api.EnvFrameworkSocket) && !hasEnv(main, api.EnvFrameworkSocket)) {
			main = c
		}
	}
	return sidecar, main
}

func hasEnv(c *corev1.Container, name string) bool {
	for _, e := range c.Env {
		if e.Name == name {
			return true
		}
	}
	return false
}

// resolveEnv evaluates a container's env the way the kubelet would for the
// parts a local run can know: literal values with $(VAR) references to
// earlier variables, and downward-API field references. Secret and
// ConfigMap references are skipped (the NATS token file is replaced
// anyway).
func resolveEnv(pod *corev1.Pod, c *corev1.Container) ([][2]string, error) {
	var out [][2]string
	seen := map[string]string{}
	for _, e := range c.Env {
		var v string
		switch {
		case e.ValueFrom == nil:
			v = expand(e.Value, seen)
		case e.ValueFrom.FieldRef != nil:
			fv, err := fieldValue(pod, e.ValueFrom.FieldRef.FieldPath)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			v = fv
		default:
			continue
		}
		seen[e.Name] = v
		out = append(out, [2]string{e.Name, v})
	}
	return out, nil
}

// expand replaces $(VAR) with earlier values; $$ escapes a $, and unknown
// references stay as written (kubelet semantics).
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteByte('$')
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

func fieldValue(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if strings.HasPrefix(path, prefix+"['") && strings.HasSuffix(path, "']") {
			return m[path[len(prefix)+2:len(path)-2]], nil
		}
	}
	return "", fmt.Errorf("field path %q is not supported by local workers", path)
}

// envList is an ordered env with last-write-wins.
type envList struct {
	keys []string
	vals map[string]string
}

func newEnvList(kv [][2]string) *envList {
	l := &envList{vals: map[string]string{}}
	l.merge(kv)
	return l
}

func (l *envList) merge(kv [][2]string) {
	for _, p := range kv {
		l.set(p[0], p[1])
	}
}

func (l *envList) set(k, v string) {
	if _, ok := l.vals[k]; !ok {
		l.keys = append(l.keys, k)
	}
	l.vals[k] = v
}

func (l *envList) del(k string) {
	if _, ok := l.vals[k]; !ok {
		return
	}
	delete(l.vals, k)
	for i, x := range l.keys {
		if x == k {
			l.keys = append(l.keys[:i], l.keys[i+1:]...)
			break
		}
	}
}

func (l *envList) list() []string {
	out := make([]string, 0, len(l.keys))
	for _, k := range l.keys {
		out = append(out, k+"="+l.vals[k])
	}
	return out
}
