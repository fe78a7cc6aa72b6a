package sshservice_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/controllers/controllerstest"
	"github.com/runplane/runplane/controllers/sshservice"
	"github.com/runplane/runplane/test/cluster"
)

var env *cluster.Cluster

// waitFor and tick bound every poll of this file.
const (
	waitFor = 60 * time.Second
	tick    = 200 * time.Millisecond
)

func TestMain(m *testing.M) {
	// The manager runplane-controller runs (Services cached by the
	// managed-by label only), for the whole package.
	controllerstest.Main(m, cluster.Options{Nodes: []cluster.Node{{Name: "gpu-0", GPUs: 8}}}, func(_ context.Context, c *cluster.Cluster) error {
		env = c
		return nil
	})
}

func setup(t *testing.T) (context.Context, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitFor)
	t.Cleanup(cancel)
	ns := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	require.NoError(t, env.CreateNamespace(ctx, ns))
	return ctx, ns
}

func createPod(t *testing.T, ctx context.Context, ns, name string, lbls, annotations map[string]string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbls, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "main"}}},
	}
	pod, err := env.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	return pod
}

func getService(ctx context.Context, ns, name string) (*corev1.Service, error) {
	return env.Client().CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
}

func getPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	return env.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
}

// checkService asserts the Service selects exactly the Pod, maps 22 to the
// sidecar port, is owned by the Pod and has the given type.
func checkService(t assert.TestingT, svc *corev1.Service, pod *corev1.Pod, typ corev1.ServiceType) {
	assert.Equal(t, typ, svc.Spec.Type)
	assert.Equal(t, map[string]string{api.LabelSSHPod: string(pod.UID)}, svc.Spec.Selector)
	if assert.Len(t, svc.Spec.Ports, 1) {
		assert.Equal(t, int32(22), svc.Spec.Ports[0].Port)
		assert.Equal(t, api.SSHPort, svc.Spec.Ports[0].TargetPort.IntValue())
	}
	if assert.Len(t, svc.OwnerReferences, 1) {
		assert.Equal(t, pod.UID, svc.OwnerReferences[0].UID)
	}
	assert.Equal(t, api.ManagedByController, svc.Labels[api.LabelManagedBy])
}

// eventuallyService waits for the Pod's Service to pass checkService.
func eventuallyService(t *testing.T, ctx context.Context, pod *corev1.Pod, typ corev1.ServiceType) *corev1.Service {
	t.Helper()
	var svc *corev1.Service
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		svc, err = getService(ctx, pod.Namespace, sshservice.ServiceName(pod.Name))
		require.NoError(c, err)
		checkService(c, svc, pod, typ)
	}, waitFor, tick, "Service of type %s for %s", typ, pod.Name)
	return svc
}

// eventuallyEndpoint waits for the Pod's endpoint annotation ("" = absent).
func eventuallyEndpoint(t *testing.T, ctx context.Context, ns, pod string, want func(*corev1.Pod) string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := getPod(ctx, ns, pod)
		require.NoError(c, err)
		got, ok := p.Annotations[api.AnnotationSSHEndpoint]
		w := want(p)
		assert.Equal(c, w != "", ok, "endpoint present")
		assert.Equal(c, w, got)
	}, waitFor, tick, "endpoint of %s", pod)
}

func hasEvent(t *testing.T, ctx context.Context, pod *corev1.Pod, match func(e string) bool, reason string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs, err := env.Client().EventsV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{})
		require.NoError(c, err)
		found := false
		for _, e := range evs.Items {
			found = found || e.Regarding.UID == pod.UID && e.Reason == reason && match(e.Note)
		}
		assert.True(c, found, "no %s Event among %d", reason, len(evs.Items))
	}, waitFor, tick)
}

func TestServicePerType(t *testing.T) {
	tests := []struct {
		name       string
		annotation string
		typ        corev1.ServiceType
	}{
		{"default", "", corev1.ServiceTypeClusterIP},
		{"clusterip", "ClusterIP", corev1.ServiceTypeClusterIP},
		{"nodeport", "NodePort", corev1.ServiceTypeNodePort},
		{"loadbalancer", "LoadBalancer", corev1.ServiceTypeLoadBalancer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, ns := setup(t)
			ann := map[string]string{}
			if tt.annotation != "" {
				ann[api.AnnotationSSHServiceType] = tt.annotation
			}
			pod := createPod(t, ctx, ns, "box", map[string]string{api.LabelSSH: api.SSHEnabled}, ann)
			svc := eventuallyService(t, ctx, pod, tt.typ)
			// The endpoint follows the Service; for NodePort it names the
			// node's address, which kwok sets once the Pod is scheduled.
			eventuallyEndpoint(t, ctx, ns, pod.Name, func(p *corev1.Pod) string {
				if tt.typ == corev1.ServiceTypeNodePort {
					return fmt.Sprintf("ssh -p %d user@%s", svc.Spec.Ports[0].NodePort, p.Status.HostIP)
				}
				return "ssh -p 22 user@box-ssh." + ns + ".svc"
			})
			p, err := getPod(ctx, ns, pod.Name)
			require.NoError(t, err)
			assert.Equal(t, string(p.UID), p.Labels[api.LabelSSHPod])
			if tt.typ == corev1.ServiceTypeNodePort {
				assert.NotEmpty(t, p.Status.HostIP)
			}
			if tt.typ != corev1.ServiceTypeLoadBalancer {
				return
			}
			// No cloud here: play the load balancer controller.
			svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}}
			_, err = env.Client().CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{})
			require.NoError(t, err)
			eventuallyEndpoint(t, ctx, ns, pod.Name, func(*corev1.Pod) string { return "ssh -p 22 user@203.0.113.7" })
		})
	}
}

func TestInvalidServiceType(t *testing.T) {
	ctx, ns := setup(t)
	pod := createPod(t, ctx, ns, "box", map[string]string{api.LabelSSH: api.SSHEnabled},
		map[string]string{api.AnnotationSSHServiceType: "Bogus"})
	svcName := sshservice.ServiceName(pod.Name)
	hasEvent(t, ctx, pod, func(note string) bool {
		return strings.Contains(note, api.AnnotationSSHServiceType) && strings.Contains(note, `"Bogus"`) &&
			strings.Contains(note, "ClusterIP, NodePort, LoadBalancer")
	}, sshservice.ReasonInvalidServiceType)
	_, err := getService(ctx, ns, svcName)
	require.True(t, apierrors.IsNotFound(err), "Service for an invalid type: err = %v, want NotFound", err)

	// Fixing the annotation publishes the Service...
	patchPod(t, ctx, ns, pod.Name, `{"metadata":{"annotations":{"`+api.AnnotationSSHServiceType+`":"NodePort"}}}`)
	eventuallyService(t, ctx, pod, corev1.ServiceTypeNodePort)
	// ...and breaking it again withdraws Service and endpoint.
	patchPod(t, ctx, ns, pod.Name, `{"metadata":{"annotations":{"`+api.AnnotationSSHServiceType+`":"nodeport"}}}`)
	waitGone(t, ctx, ns, svcName)
	eventuallyEndpoint(t, ctx, ns, pod.Name, func(*corev1.Pod) string { return "" })
}

func patchPod(t *testing.T, ctx context.Context, ns, name, patch string) {
	t.Helper()
	_, err := env.Client().CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

func waitGone(t *testing.T, ctx context.Context, ns, svcName string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := getService(ctx, ns, svcName)
		return apierrors.IsNotFound(err)
	}, waitFor, tick, "Service %s deleted", svcName)
}

func TestTypeChangeInPlace(t *testing.T) {
	ctx, ns := setup(t)
	pod := createPod(t, ctx, ns, "box", map[string]string{api.LabelSSH: api.SSHEnabled}, nil)
	var uid types.UID
	for _, typ := range []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeClusterIP} {
		patchPod(t, ctx, ns, pod.Name, `{"metadata":{"annotations":{"`+api.AnnotationSSHServiceType+`":"`+string(typ)+`"}}}`)
		svc := eventuallyService(t, ctx, pod, typ)
		if uid == "" {
			uid = svc.UID
		}
		require.Equal(t, uid, svc.UID, "Service was recreated, want an in-place update")
	}
}

func TestDisableAndDelete(t *testing.T) {
	ctx, ns := setup(t)
	pod := createPod(t, ctx, ns, "box", map[string]string{api.LabelSSH: api.SSHEnabled}, nil)
	other := createPod(t, ctx, ns, "other", map[string]string{api.LabelSSH: api.SSHEnabled}, nil)
	plain := createPod(t, ctx, ns, "plain", nil, nil)
	for _, p := range []*corev1.Pod{pod, other} {
		eventuallyService(t, ctx, p, corev1.ServiceTypeClusterIP)
	}

	// Removing the label withdraws the Service, the endpoint and the
	// selector label.
	patchPod(t, ctx, ns, pod.Name, `{"metadata":{"labels":{"`+api.LabelSSH+`":null}}}`)
	waitGone(t, ctx, ns, sshservice.ServiceName(pod.Name))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := getPod(ctx, ns, pod.Name)
		require.NoError(c, err)
		assert.NotContains(c, p.Labels, api.LabelSSHPod)
		assert.NotContains(c, p.Annotations, api.AnnotationSSHEndpoint)
	}, waitFor, tick, "Pod cleaned up")

	// Deleting a Pod takes its Service with it (garbage collection through
	// the owner reference).
	require.NoError(t, env.Client().CoreV1().Pods(ns).Delete(ctx, other.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
	waitGone(t, ctx, ns, sshservice.ServiceName(other.Name))

	// A Pod without the label never got a Service: the controller has
	// handled the two labelled Pods created after it, and the API server
	// saw no Service for it.
	_, err := getService(ctx, ns, sshservice.ServiceName(plain.Name))
	require.True(t, apierrors.IsNotFound(err), "Service for an unlabelled Pod: err = %v", err)
}

// TestUserServiceIsNotTouched: a Service of the same name that runplane does
// not own is left alone and reported.
func TestUserServiceIsNotTouched(t *testing.T) {
	ctx, ns := setup(t)
	mine := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: sshservice.ServiceName("box"), Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "mine"}, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	_, err := env.Client().CoreV1().Services(ns).Create(ctx, mine, metav1.CreateOptions{})
	require.NoError(t, err)
	pod := createPod(t, ctx, ns, "box", map[string]string{api.LabelSSH: api.SSHEnabled}, nil)
	hasEvent(t, ctx, pod, func(string) bool { return true }, sshservice.ReasonServiceConflict)
	svc, err := getService(ctx, ns, mine.Name)
	require.NoError(t, err)
	assert.Equal(t, "mine", svc.Spec.Selector["app"], "user's Service was modified")
	assert.Empty(t, svc.OwnerReferences, "user's Service was modified")
}
