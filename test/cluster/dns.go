package cluster

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/hack/images"
)

// The real nodes' cluster DNS: CoreDNS (built by test/testbin/node.sh,
// image images.CoreDNSRef) as a Deployment on the real nodes behind the
// Service kube-system/kube-dns at ClusterDNSIP, as kubeadm sets it up, so
// Pods resolve <service>.<namespace>.svc.cluster.local. kwok nodes need
// none: they run no containers.

const dnsName = "coredns"

// dnsCorefile serves the cluster domain and reverse lookups from the API
// and refuses the rest: there is no upstream (no internet here).
const dnsCorefile = `.:53 {
    errors
    health :8080
    ready :8181
    kubernetes ` + ClusterDomain + ` in-addr.arpa ip6.arpa {
        pods insecure
    }
}
`

// startDNS creates CoreDNS and waits until it is Ready.
func startDNS(ctx context.Context, c kubernetes.Interface) error {
	const ns = "kube-system"
	labels := map[string]string{"k8s-app": "kube-dns"}
	if err := createDNS(ctx, c, ns, labels); err != nil {
		return fmt.Errorf("cluster DNS: %w", err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := c.AppsV1().Deployments(ns).Get(ctx, dnsName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return d.Status.ReadyReplicas == 1, nil
	})
	if err != nil {
		return fmt.Errorf("cluster DNS never became Ready: %w", err)
	}
	return nil
}

func createDNS(ctx context.Context, c kubernetes.Interface, ns string, labels map[string]string) error {
	meta := metav1.ObjectMeta{Name: dnsName, Namespace: ns, Labels: labels}
	creates := []func() error{
		func() error {
			_, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: meta}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
				ObjectMeta: metav1.ObjectMeta{Name: "runplane-local:coredns"},
				Rules: []rbacv1.PolicyRule{
					{APIGroups: []string{""}, Resources: []string{"services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
					{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
				},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "runplane-local:coredns"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "runplane-local:coredns"},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: dnsName, Namespace: ns}},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"Corefile": dnsCorefile}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.CoreV1().Services(ns).Create(ctx, &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: ns, Labels: labels},
				Spec: corev1.ServiceSpec{ClusterIP: ClusterDNSIP, Selector: labels, Ports: []corev1.ServicePort{
					{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
					{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
				}},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.AppsV1().Deployments(ns).Create(ctx, dnsDeployment(meta, labels), metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range creates {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// dnsDeployment runs CoreDNS restricted, on the real nodes only. It
// listens on 53, as cluster DNS does elsewhere, so that NetworkPolicies
// allowing DNS on port 53 (they see the Pod's port, after the Service's
// DNAT) work here too: the Pod's own namespace makes 53 unprivileged (a
// safe sysctl), no capability needed.
func dnsDeployment(meta metav1.ObjectMeta, labels map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: dnsName,
					// Its own lookups go nowhere: it is the nameserver.
					DNSPolicy:    corev1.DNSDefault,
					NodeSelector: map[string]string{RealNodeLabel: "true"},
					Tolerations:  []corev1.Toleration{RealNodeToleration},
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "53"}},
					},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{
						Name: dnsName, Image: images.CoreDNSRef, ImagePullPolicy: corev1.PullNever,
						Args: []string{"-conf", "/etc/coredns/Corefile"},
						Ports: []corev1.ContainerPort{
							{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
						},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}},
							PeriodSeconds: 1,
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: dnsName}},
					}}},
				},
			},
		},
	}
}
