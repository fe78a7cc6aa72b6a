package sshservice_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/controllers/sshservice"
	"github.com/runplane/runplane/test/cluster"
)

var env *cluster.Cluster

func TestMain(m *testing.M) {
	cluster.Main(m, cluster.Options{Nodes: []cluster.Node{{Name: "gpu-0", GPUs: 8}}}, func(c *cluster.Cluster) {
		env = c
		if err := startManager(c); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
			os.Exit(1)
		}
	})
}

// startManager runs the controller in-process for the whole package, in a
// manager configured like controllers.NewManager (Services cached by the
// managed-by label only).
func startManager(c *cluster.Cluster) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	owned := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{api.LabelManagedBy: api.ManagedByController})}
	mgr, err := ctrl.NewManager(c.RESTConfig(), ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Service{}: owned}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return err
	}
	if err := sshservice.Setup(mgr); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "manager stopped:", err)
		}
	}()
	return nil
}

func setup(t *testing.T) (context.Context, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	ns := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	return ctx, ns
}

func createPod(t *testing.T, ctx context.Context, ns, name string, lbls, annotations map[string]string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: lbls, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "main"}}},
	}
	pod, err := env.Client().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// waitFor polls cond until it returns nil or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() error) {
	t.Helper()
	var err error
	for {
		if err = cond(); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func getService(ctx context.Context, ns, name string) (*corev1.Service, error) {
	return env.Client().CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
}

func getPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	return env.Client().CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
}

// checkService verifies the Service selects exactly the Pod, maps 22 to the
// sidecar port, is owned by the Pod and has the given type.
func checkService(svc *corev1.Service, pod *corev1.Pod, typ corev1.ServiceType) error {
	switch {
	case svc.Spec.Type != typ:
		return fmt.Errorf("type %s, want %s", svc.Spec.Type, typ)
	case len(svc.Spec.Selector) != 1 || svc.Spec.Selector[api.LabelSSHPod] != string(pod.UID):
		return fmt.Errorf("selector %v, want only %s=%s", svc.Spec.Selector, api.LabelSSHPod, pod.UID)
	case len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 22 || svc.Spec.Ports[0].TargetPort.IntValue() != api.SSHPort:
		return fmt.Errorf("ports %+v, want 22 -> %d", svc.Spec.Ports, api.SSHPort)
	case len(svc.OwnerReferences) != 1 || svc.OwnerReferences[0].UID != pod.UID:
		return fmt.Errorf("owners %+v, want the Pod %s", svc.OwnerReferences, pod.UID)
	case svc.Labels[api.LabelManagedBy] != api.ManagedByController:
		return fmt.Errorf("labels %v lack %s", svc.Labels, api.LabelManagedBy)
	}
	return nil
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
			svcName := sshservice.ServiceName(pod.Name)
			var svc *corev1.Service
			waitFor(t, ctx, "Service published", func() (err error) {
				if svc, err = getService(ctx, ns, svcName); err != nil {
					return err
				}
				return checkService(svc, pod, tt.typ)
			})
			// The endpoint follows the Service; for NodePort it names the
			// node's address, which kwok sets once the Pod is scheduled.
			waitFor(t, ctx, "Pod labelled and annotated", func() error {
				p, err := getPod(ctx, ns, pod.Name)
				if err != nil {
					return err
				}
				if p.Labels[api.LabelSSHPod] != string(p.UID) {
					return fmt.Errorf("labels %v", p.Labels)
				}
				want := "ssh -p 22 user@box-ssh." + ns + ".svc"
				if tt.typ == corev1.ServiceTypeNodePort {
					if p.Status.HostIP == "" {
						return fmt.Errorf("pod has no hostIP yet")
					}
					want = fmt.Sprintf("ssh -p %d user@%s", svc.Spec.Ports[0].NodePort, p.Status.HostIP)
				}
				if got := p.Annotations[api.AnnotationSSHEndpoint]; got != want {
					return fmt.Errorf("endpoint %q, want %q", got, want)
				}
				return nil
			})
			if tt.typ != corev1.ServiceTypeLoadBalancer {
				return
			}
			// No cloud here: play the load balancer controller.
			svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}}
			if _, err := env.Client().CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, ctx, "endpoint follows the load balancer", func() error {
				p, err := getPod(ctx, ns, pod.Name)
				if err != nil {
					return err
				}
				if got := p.Annotations[api.AnnotationSSHEndpoint]; got != "ssh -p 22 user@203.0.113.7" {
					return fmt.Errorf("endpoint %q", got)
				}
				return nil
			})
		})
	}
}

func TestInvalidServiceType(t *testing.T) {
	ctx, ns := setup(t)
	pod := createPod(t, ctx, ns, "box", map[string]string{api.LabelSSH: api.SSHEnabled},
		map[string]string{api.AnnotationSSHServiceType: "Bogus"})
	svcName := sshservice.ServiceName(pod.Name)
	waitFor(t, ctx, "Warning Event naming the key", func() error {
		evs, err := env.Client().EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.UID == pod.UID && e.Reason == sshservice.ReasonInvalidServiceType && e.Type == corev1.EventTypeWarning &&
				strings.Contains(e.Note, api.AnnotationSSHServiceType) && strings.Contains(e.Note, `"Bogus"`) &&
				strings.Contains(e.Note, "ClusterIP, NodePort, LoadBalancer") {
				return nil
			}
		}
		return fmt.Errorf("no such Event among %d", len(evs.Items))
	})
	if _, err := getService(ctx, ns, svcName); !apierrors.IsNotFound(err) {
		t.Fatalf("Service for an invalid type: err = %v, want NotFound", err)
	}

	// Fixing the annotation publishes the Service...
	patchPod(t, ctx, ns, pod.Name, `{"metadata":{"annotations":{"`+api.AnnotationSSHServiceType+`":"NodePort"}}}`)
	waitFor(t, ctx, "Service after the fix", func() error {
		svc, err := getService(ctx, ns, svcName)
		if err != nil {
			return err
		}
		return checkService(svc, pod, corev1.ServiceTypeNodePort)
	})
	// ...and breaking it again withdraws Service and endpoint.
	patchPod(t, ctx, ns, pod.Name, `{"metadata":{"annotations":{"`+api.AnnotationSSHServiceType+`":"nodeport"}}}`)
	waitGone(t, ctx, ns, svcName)
	waitFor(t, ctx, "endpoint removed", func() error {
		p, err := getPod(ctx, ns, pod.Name)
		if err != nil {
			return err
		}
		if v, ok := p.Annotations[api.AnnotationSSHEndpoint]; ok {
			return fmt.Errorf("endpoint still %q", v)
		}
		return nil
	})
}

func patchPod(t *testing.T, ctx context.Context, ns, name, patch string) {
	t.Helper()
	if _, err := env.Client().CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitGone(t *testing.T, ctx context.Context, ns, svcName string) {
	t.Helper()
	waitFor(t, ctx, "Service "+svcName+" deleted", func() error {
		_, err := getService(ctx, ns, svcName)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (err %v)", err)
	})
}

func TestTypeChangeInPlace(t *testing.T) {
	ctx, ns := setup(t)
	pod := createPod(t, ctx, ns, "box", map[string]string{api.LabelSSH: api.SSHEnabled}, nil)
	svcName := sshservice.ServiceName(pod.Name)
	var uid types.UID
	for _, typ := range []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeClusterIP} {
		patchPod(t, ctx, ns, pod.Name, `{"metadata":{"annotations":{"`+api.AnnotationSSHServiceType+`":"`+string(typ)+`"}}}`)
		waitFor(t, ctx, "Service of type "+string(typ), func() error {
			svc, err := getService(ctx, ns, svcName)
			if err != nil {
				return err
			}
			if uid == "" {
				uid = svc.UID
			} else if svc.UID != uid {
				return fmt.Errorf("Service was recreated, want an in-place update")
			}
			return checkService(svc, pod, typ)
		})
	}
}

func TestDisableAndDelete(t *testing.T) {
	ctx, ns := setup(t)
	pod := createPod(t, ctx, ns, "box", map[string]string{api.LabelSSH: api.SSHEnabled}, nil)
	other := createPod(t, ctx, ns, "other", map[string]string{api.LabelSSH: api.SSHEnabled}, nil)
	plain := createPod(t, ctx, ns, "plain", nil, nil)
	for _, p := range []*corev1.Pod{pod, other} {
		waitFor(t, ctx, "Service for "+p.Name, func() error {
			_, err := getService(ctx, ns, sshservice.ServiceName(p.Name))
			return err
		})
	}

	// Removing the label withdraws the Service, the endpoint and the
	// selector label.
	patchPod(t, ctx, ns, pod.Name, `{"metadata":{"labels":{"`+api.LabelSSH+`":null}}}`)
	waitGone(t, ctx, ns, sshservice.ServiceName(pod.Name))
	waitFor(t, ctx, "Pod cleaned up", func() error {
		p, err := getPod(ctx, ns, pod.Name)
		if err != nil {
			return err
		}
		if _, ok := p.Labels[api.LabelSSHPod]; ok {
			return fmt.Errorf("labels %v", p.Labels)
		}
		if _, ok := p.Annotations[api.AnnotationSSHEndpoint]; ok {
			return fmt.Errorf("annotations %v", p.Annotations)
		}
		return nil
	})

	// Deleting a Pod takes its Service with it (garbage collection through
	// the owner reference).
	if err := env.Client().CoreV1().Pods(ns).Delete(ctx, other.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ctx, ns, sshservice.ServiceName(other.Name))

	// A Pod without the label never got a Service.
	if _, err := getService(ctx, ns, sshservice.ServiceName(plain.Name)); !apierrors.IsNotFound(err) {
		t.Fatalf("Service for an unlabelled Pod: err = %v", err)
	}
}

// TestUserServiceIsNotTouched: a Service of the same name that runplane does
// not own is left alone and reported.
func TestUserServiceIsNotTouched(t *testing.T) {
	ctx, ns := setup(t)
	mine := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: sshservice.ServiceName("box"), Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "mine"}, Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if _, err := env.Client().CoreV1().Services(ns).Create(ctx, mine, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := createPod(t, ctx, ns, "box", map[string]string{api.LabelSSH: api.SSHEnabled}, nil)
	waitFor(t, ctx, "conflict Event", func() error {
		evs, err := env.Client().EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Regarding.UID == pod.UID && e.Reason == sshservice.ReasonServiceConflict {
				return nil
			}
		}
		return fmt.Errorf("no conflict Event among %d", len(evs.Items))
	})
	svc, err := getService(ctx, ns, mine.Name)
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Selector["app"] != "mine" || len(svc.OwnerReferences) != 0 {
		t.Fatalf("user's Service was modified: %+v", svc.Spec)
	}
}
