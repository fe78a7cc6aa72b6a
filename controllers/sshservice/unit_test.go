package sshservice

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
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
			if errs := validation.IsDNS1035Label(got); len(errs) > 0 {
				t.Fatalf("%q is not a valid Service name: %v", got, errs)
			}
			if tt.want != "" && got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if other, dup := seen[got]; dup {
				t.Errorf("%q and %q share Service name %q", tt.pod, other, got)
			}
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
			if tt.wantErr {
				if err == nil {
					t.Fatalf("got %q, want an error", got)
				}
				for _, want := range []string{"runplane.io/ssh-service-type", "ClusterIP, NodePort, LoadBalancer", tt.in} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not name %q", err, want)
					}
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
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
			if got := Endpoint(tt.svc, tt.hostIP); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
