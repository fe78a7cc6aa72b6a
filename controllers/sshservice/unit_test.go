package sshservice

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/eventstest"
)

func TestServiceName(t *testing.T) {
	long := strings.Repeat("a", 70)
	tests := []struct {
		pod  string
		want string // exact, or "" to check validity and uniqueness only
	}{
		{"dev-box-0", "dev-box-0-ssh"},
		{"jupyter", "jupyter-ssh"},
		{"0day", ""},
		{"team.dev.box", ""},
		{long, ""},
		{long + "b", ""},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		t.Run(tt.pod, func(t *testing.T) {
			got := ServiceName(tt.pod)
			require.Empty(t, validation.IsDNS1035Label(got), "%q is not a valid Service name", got)
			if tt.want != "" {
				assert.Equal(t, tt.want, got)
			}
			assert.NotContains(t, seen, got, "%q shares its Service name with %q", tt.pod, seen[got])
			seen[got] = tt.pod
		})
	}
}

func TestParseServiceType(t *testing.T) {
	tests := []struct {
		in      string
		want    corev1.ServiceType
		wantErr bool
	}{
		{"", corev1.ServiceTypeClusterIP, false},
		{"ClusterIP", corev1.ServiceTypeClusterIP, false},
		{"NodePort", corev1.ServiceTypeNodePort, false},
		{"LoadBalancer", corev1.ServiceTypeLoadBalancer, false},
		{"nodeport", "", true},
		{"ExternalName", "", true},
		{"Bogus", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseServiceType(tt.in)
			if !tt.wantErr {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
				return
			}
			require.Error(t, err)
			for _, want := range []string{"runplane.io/ssh-service-type", "ClusterIP, NodePort, LoadBalancer", tt.in} {
				assert.Contains(t, err.Error(), want)
			}
		})
	}
}

func TestEndpoint(t *testing.T) {
	svc := func(typ corev1.ServiceType, nodePort int32, ingress ...corev1.LoadBalancerIngress) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "box-ssh", Namespace: "team"},
			Spec:       corev1.ServiceSpec{Type: typ, Ports: []corev1.ServicePort{{Port: 22, NodePort: nodePort}}},
			Status:     corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: ingress}},
		}
	}
	tests := []struct {
		name   string
		svc    *corev1.Service
		hostIP string
		want   string
	}{
		{"cluster ip", svc(corev1.ServiceTypeClusterIP, 0), "10.0.0.5", "ssh -p 22 user@box-ssh.team.svc"},
		{"node port", svc(corev1.ServiceTypeNodePort, 31022), "10.0.0.5", "ssh -p 31022 user@10.0.0.5"},
		{"node port, pod not scheduled", svc(corev1.ServiceTypeNodePort, 31022), "", "ssh -p 31022 user@<node-address>"},
		{"node port not allocated yet", svc(corev1.ServiceTypeNodePort, 0), "10.0.0.5", "ssh -p 22 user@box-ssh.team.svc"},
		{"load balancer pending", svc(corev1.ServiceTypeLoadBalancer, 31022), "", "ssh -p 22 user@box-ssh.team.svc"},
		{"load balancer ip", svc(corev1.ServiceTypeLoadBalancer, 31022, corev1.LoadBalancerIngress{IP: "203.0.113.7"}), "", "ssh -p 22 user@203.0.113.7"},
		{"load balancer hostname", svc(corev1.ServiceTypeLoadBalancer, 31022, corev1.LoadBalancerIngress{Hostname: "lb.example.com"}), "", "ssh -p 22 user@lb.example.com"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Endpoint(tt.svc, tt.hostIP))
		})
	}
}

const podUID = types.UID("pod-uid")

func sshPod(serviceType string, extraLabels ...string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "box", Namespace: "team", UID: podUID, Labels: map[string]string{api.LabelSSH: api.SSHEnabled}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "main"}}},
		Status:     corev1.PodStatus{HostIP: "10.0.0.5"},
	}
	if serviceType != "" {
		p.Annotations = map[string]string{api.AnnotationSSHServiceType: serviceType}
	}
	for i := 0; i+1 < len(extraLabels); i += 2 {
		p.Labels[extraLabels[i]] = extraLabels[i+1]
	}
	return p
}

// service is the Pod's SSH Service as the controller left it, of a type,
// owned by ownerUID.
func service(typ corev1.ServiceType, nodePort int32, ownerUID types.UID) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "box-ssh", Namespace: "team", UID: "svc-uid",
			Labels:          map[string]string{api.LabelManagedBy: api.ManagedByController, api.LabelSSHPod: string(ownerUID)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "box", UID: ownerUID, Controller: ptr.To(true)}}},
		Spec: corev1.ServiceSpec{Type: typ, Selector: map[string]string{api.LabelSSHPod: string(ownerUID)},
			Ports: []corev1.ServicePort{{Name: "ssh", Protocol: corev1.ProtocolTCP, Port: ServicePort, NodePort: nodePort}}},
	}
}

func TestReconcile(t *testing.T) {
	unlabelled := sshPod("", api.LabelSSHPod, string(podUID))
	delete(unlabelled.Labels, api.LabelSSH)
	unlabelled.Annotations = map[string]string{api.AnnotationSSHEndpoint: "ssh -p 22 user@box-ssh.team.svc"}
	userSvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "box-ssh", Namespace: "team"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "mine"}}}
	tests := []struct {
		name         string
		objects      []client.Object
		wantType     corev1.ServiceType // "" = no Service of ours
		wantEndpoint string
		wantEvent    string // "<type> <reason>", "" for none
	}{{
		name:     "default: ClusterIP Service",
		objects:  []client.Object{sshPod("")},
		wantType: corev1.ServiceTypeClusterIP, wantEndpoint: "ssh -p 22 user@box-ssh.team.svc", wantEvent: "Normal " + ReasonServiceCreated,
	}, {
		name:     "NodePort: the node's address and port",
		objects:  []client.Object{sshPod("NodePort"), service(corev1.ServiceTypeNodePort, 31022, podUID)},
		wantType: corev1.ServiceTypeNodePort, wantEndpoint: "ssh -p 31022 user@10.0.0.5",
	}, {
		name:     "type changed in place: ClusterIP to LoadBalancer",
		objects:  []client.Object{sshPod("LoadBalancer"), service(corev1.ServiceTypeClusterIP, 0, podUID)},
		wantType: corev1.ServiceTypeLoadBalancer, wantEndpoint: "ssh -p 22 user@box-ssh.team.svc",
	}, {
		name:     "a recreated Pod of the same name takes its Service over",
		objects:  []client.Object{sshPod(""), service(corev1.ServiceTypeClusterIP, 0, "old-uid")},
		wantType: corev1.ServiceTypeClusterIP, wantEndpoint: "ssh -p 22 user@box-ssh.team.svc",
	}, {
		name:      "invalid type: Warning, no Service, no endpoint",
		objects:   []client.Object{sshPod("Bogus"), service(corev1.ServiceTypeClusterIP, 0, podUID)},
		wantEvent: "Warning " + ReasonInvalidServiceType,
	}, {
		name:    "label removed: Service, selector label and endpoint withdrawn",
		objects: []client.Object{unlabelled, service(corev1.ServiceTypeClusterIP, 0, podUID)},
	}, {
		name:      "a user's Service of the same name: left alone, reported",
		objects:   []client.Object{sshPod(""), userSvc},
		wantEvent: "Warning " + ReasonServiceConflict,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithObjects(tt.objects...).Build()
			rec := events.NewFakeRecorder(10)
			r := &Reconciler{Client: c, Recorder: rec}
			ctx := context.Background()
			key := types.NamespacedName{Namespace: "team", Name: "box"}

			_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
			require.NoError(t, err)

			var pod corev1.Pod
			require.NoError(t, c.Get(ctx, key, &pod))
			assert.Equal(t, tt.wantEndpoint, pod.Annotations[api.AnnotationSSHEndpoint])
			var svc corev1.Service
			err = c.Get(ctx, types.NamespacedName{Namespace: "team", Name: "box-ssh"}, &svc)
			switch {
			case tt.wantType != "":
				require.NoError(t, err)
				assert.Equal(t, tt.wantType, svc.Spec.Type)
				assert.Equal(t, map[string]string{api.LabelSSHPod: string(podUID)}, svc.Spec.Selector)
				assert.Equal(t, string(podUID), pod.Labels[api.LabelSSHPod], "the Pod carries the selector label")
				require.Len(t, svc.Spec.Ports, 1)
				assert.Equal(t, int32(api.SSHPort), svc.Spec.Ports[0].TargetPort.IntVal)
				assert.Equal(t, podUID, svc.OwnerReferences[0].UID)
			case tt.objects[len(tt.objects)-1] == userSvc:
				require.NoError(t, err)
				assert.Equal(t, userSvc.Spec.Selector, svc.Spec.Selector, "the user's Service is untouched")
				assert.Empty(t, svc.OwnerReferences)
			default:
				assert.True(t, apierrors.IsNotFound(err), "Service: %v", err)
				if pod.Labels[api.LabelSSH] != api.SSHEnabled {
					assert.NotContains(t, pod.Labels, api.LabelSSHPod, "the selector label goes with SSH")
				}
			}
			var want []string
			if tt.wantEvent != "" {
				want = []string{tt.wantEvent}
			}
			assert.Equal(t, want, eventstest.Drain(rec))
		})
	}
}
