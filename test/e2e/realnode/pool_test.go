package realnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/hack/images"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/kit"
)

// poolDeployment is an empty pool (0 replicas) of framework-echo pinned to
// the real node; framework is its container (image, command, mounts).
func poolDeployment(name string, framework corev1.Container, volumes []corev1.Volume, annotations map[string]string) *appsv1.Deployment {
	labels := map[string]string{api.LabelPool: name}
	framework.Name, framework.Image, framework.ImagePullPolicy = "framework", images.EchoRef, corev1.PullNever
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers:                    []corev1.Container{framework},
					Volumes:                       volumes,
					NodeSelector:                  map[string]string{cluster.RealNodeLabel: "true"},
					Tolerations:                   []corev1.Toleration{cluster.RealNodeToleration},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
				},
			},
		},
	}
}

// waitPoolKnown waits until the queue serves the pool.
func waitPoolKnown(t testing.TB, name string) {
	t.Helper()
	require.Eventually(t, func() bool { return kit.HTTPOK(t.Context(), queueURL+"/v1/namespaces/"+ns+"/pools/"+name) },
		time.Minute, 100*time.Millisecond, "the queue never learned the pool")
}

// invokeSync posts a sync invocation and decodes the Record it answers.
// A non-empty id is the invocation's ID.
func invokeSync(name string, payload any, id string) (messages.Record, error) {
	req := map[string]any{"mode": "sync", "timeoutSeconds": 180, "payload": payload}
	if id != "" {
		req["invocationID"] = id
	}
	body, err := json.Marshal(req)
	if err != nil {
		return messages.Record{}, err
	}
	resp, err := http.Post(queueURL+"/v1/namespaces/"+ns+"/pools/"+name+"/invocations", "application/json", bytes.NewReader(body))
	if err != nil {
		return messages.Record{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return messages.Record{}, err
	}
	var rec messages.Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, fmt.Errorf("invocation: HTTP %d %s: %w", resp.StatusCode, data, err)
	}
	if rec.State != messages.StateSucceeded {
		return rec, fmt.Errorf("invocation: HTTP %d %s", resp.StatusCode, data)
	}
	if !bytes.Contains(data, []byte(`"prompt":"real"`)) {
		return rec, fmt.Errorf("the framework's echo is not in the answer: %s", data)
	}
	return rec, nil
}

// podReady reports the Pod's Ready condition.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// running reports whether the Pod's container name runs.
func running(p *corev1.Pod, name string) bool {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == name {
			return c.State.Running != nil
		}
	}
	return false
}

// gatedEcho is framework-echo started only once the test creates
// /gate/open (through exec): until then the Pod runs, its sidecar is
// connected and the framework does not answer. read -t waits on the
// container's open stdin (busybox sh has no sleep in this image).
const gatedEcho = `until [ -e /gate/open ]; do read -t 1 _; done; exec /usr/local/bin/framework-echo`

// An empty pool scales from zero on the real node: the webhook injects the
// real sidecar (runplane image) as a native sidecar, which authenticates to
// NATS with its Pod-bound token through the queue's auth callout (which
// creates its dispatch consumer); the Pod is Ready only once framework-echo
// answers on the socket in the shared emptyDir; the invocation's result
// comes back through the queue's HTTP API. The framework container holds
// no NATS credential: looked at from inside it.
func TestPoolScalesFromZeroOnRealNode(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	name := "echo"
	d := poolDeployment(name, corev1.Container{
		Command: []string{"sh", "-c", gatedEcho}, Stdin: true,
		VolumeMounts: []corev1.VolumeMount{{Name: "gate", MountPath: "/gate"}},
	}, []corev1.Volume{{Name: "gate", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}, nil)
	_, err := env.Client().AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = env.Client().AppsV1().Deployments(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	waitPoolKnown(t, name)

	// The sidecar's Events, as the queue receives them.
	nc := st.NATSConn(t)
	events := make(chan messages.Event, 64)
	sub, err := nc.Subscribe(messages.Subjects{Prefix: api.DefaultSubjectPrefix}.Metrics(ns, name)+".*", func(m *nats.Msg) {
		var ev messages.Event
		if json.Unmarshal(m.Data, &ev) == nil {
			select {
			case events <- ev:
			default:
			}
		}
	})
	require.NoError(t, err, "subscribing to the pool's worker Events")
	t.Cleanup(func() { require.NoError(t, sub.Unsubscribe()) })

	type answer struct {
		rec messages.Record
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		rec, err := invokeSync(name, map[string]string{"prompt": "real"}, "")
		answered <- answer{rec, err}
	}()

	// Barrier: the sidecar registered (its consumer exists, so the callout
	// admitted it) while the framework does not serve.
	var ev messages.Event
	select {
	case ev = <-events:
	case a := <-answered:
		t.Fatalf("answered before the framework started: %+v %v", a.rec, a.err)
	case <-ctx.Done():
		t.Fatal("the worker never registered: the sidecar did not get through the NATS auth callout")
	}
	require.False(t, ev.Ready, "the sidecar reported ready before the framework started: %+v", ev)
	pod, err := env.Client().CoreV1().Pods(ns).Get(ctx, ev.Worker, metav1.GetOptions{})
	require.NoError(t, err, "the worker %q is no Pod", ev.Worker)
	require.Equal(t, node.Name, pod.Spec.NodeName)
	require.NoError(t, wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pod, err = env.Client().CoreV1().Pods(ns).Get(ctx, ev.Worker, metav1.GetOptions{})
		return err == nil && pod.Status.PodIP != "" && running(pod, "framework"), nil
	}), "the framework container never ran")
	// The readiness endpoint the kubelet probes says not ready, and the
	// Pod is not Ready: only the framework is missing.
	var probe *corev1.Probe
	for _, c := range pod.Spec.InitContainers {
		if c.Name == api.SidecarContainerName {
			probe = c.ReadinessProbe
		}
	}
	require.NotNil(t, probe, "the sidecar has no readiness probe")
	readyz := fmt.Sprintf("http://%s:%d%s", pod.Status.PodIP, api.SidecarHTTPPort, probe.HTTPGet.Path)
	resp, err := http.Get(readyz)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s with the framework not serving", readyz)
	require.False(t, podReady(pod), "the Pod is Ready before its framework serves")

	// From inside the framework container: no NATS setting in its
	// environment, no NATS token volume (the sidecar's only).
	out, err := exec.CommandContext(ctx, env.Binary("kubectl"), "--kubeconfig", env.Kubeconfig(), "-n", ns, "exec", pod.Name, "-c", "framework", "--",
		"sh", "-c", "env; echo; cat /proc/mounts; echo; ls -R /var/run/secrets 2>&1; echo end").CombinedOutput()
	require.NoError(t, err, "exec: %s", out)
	require.Contains(t, string(out), "end")
	for _, s := range []string{api.EnvNATSURL, api.EnvNATSTokenFile, "NATS", api.NATSTokenAudience, api.NATSCredentialsMountDir} {
		require.NotContains(t, string(out), s, "the framework container sees a NATS credential or setting:\n%s", out)
	}
	require.Contains(t, string(out), api.EnvFrameworkSocket, "the exec did not show the framework's env:\n%s", out)
	// What the framework container can present is no NATS credential: its
	// ServiceAccount token (when mounted) is refused by the callout.
	tok, err := exec.CommandContext(ctx, env.Binary("kubectl"), "--kubeconfig", env.Kubeconfig(), "-n", ns, "exec", pod.Name, "-c", "framework", "--",
		"sh", "-c", "cat /var/run/secrets/kubernetes.io/serviceaccount/token 2>/dev/null; true").Output()
	require.NoError(t, err)
	if len(tok) > 0 {
		_, err := nats.Connect(natsURL, natsAuth.TLSOption(), nats.Token(string(tok)), nats.MaxReconnects(0))
		require.Error(t, err, "NATS admitted the framework container's ServiceAccount token")
		require.ErrorContains(t, err, "Authorization Violation")
	} else {
		t.Log("the framework container has no ServiceAccount token to present")
	}

	// Open the gate: framework-echo starts; then, and only then, the Pod
	// becomes Ready and the invocation is answered.
	opened := time.Now()
	out, err = exec.CommandContext(ctx, env.Binary("kubectl"), "--kubeconfig", env.Kubeconfig(), "-n", ns, "exec", pod.Name, "-c", "framework", "--",
		"sh", "-c", ": > /gate/open").CombinedOutput()
	require.NoError(t, err, "exec: %s", out)
	var a answer
	select {
	case a = <-answered:
	case <-ctx.Done():
		t.Fatal("no answer after the framework started")
	}
	require.NoError(t, a.err)
	require.Equal(t, pod.Name, a.rec.Worker)
	require.NoError(t, wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pod, err = env.Client().CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && podReady(pod), nil
	}), "the Pod never became Ready")
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			// Condition times have a resolution of one second.
			require.False(t, c.LastTransitionTime.Time.Before(opened.Truncate(time.Second)),
				"Ready at %s, before the framework started at %s", c.LastTransitionTime, opened)
		}
	}
}
