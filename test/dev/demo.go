package main

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/test/cluster"
)

// demoNamespace holds make dev's examples.
const demoNamespace = "demo"

// demoCaller is the ServiceAccount of the demo namespace whose token make
// dev prints: bound to runplane-invoker there, it may invoke, read and
// cancel the demo pools' invocations, and nothing in other namespaces.
const demoCaller = "demo-caller"

// createDemo creates what the README's examples use: a serverless pool
// "echo" at zero replicas (its workers run framework-echo locally), a stock
// of g1.1 placeholders the runplane-scheduler can take over, and a caller
// of the ingress. It returns that caller's token (TokenRequest, 24h).
func createDemo(ctx context.Context, c *cluster.Cluster) (string, error) {
	for _, ns := range []string{demoNamespace, api.DefaultStockNamespace} {
		if err := c.CreateNamespace(ctx, ns); err != nil {
			return "", err
		}
	}
	client := c.Client()
	tok, err := demoToken(ctx, client)
	if err != nil {
		return "", err
	}
	return tok, createDemoWorkloads(ctx, client)
}

// demoToken creates the chart's runplane-invoker ClusterRole (make dev
// installs no chart), binds it to demoCaller in the demo namespace and
// requests a token.
func demoToken(ctx context.Context, client kubernetes.Interface) (string, error) {
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "runplane-invoker"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{callerauth.Group}, Resources: []string{"pools/invocations"}, Verbs: []string{"create", "get", "update"}},
		{APIGroups: []string{callerauth.Group}, Resources: []string{"pools"}, Verbs: []string{"get"}},
	}}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating ClusterRole runplane-invoker: %w", err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: demoCaller, Namespace: demoNamespace}}
	if _, err := client.CoreV1().ServiceAccounts(demoNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating ServiceAccount %s: %w", demoCaller, err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: demoCaller, Namespace: demoNamespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "runplane-invoker"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: demoNamespace, Name: demoCaller}}}
	if _, err := client.RbacV1().RoleBindings(demoNamespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating RoleBinding %s: %w", demoCaller, err)
	}
	tr, err := client.CoreV1().ServiceAccounts(demoNamespace).CreateToken(ctx, demoCaller,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for %s: %w", demoCaller, err)
	}
	return tr.Status.Token, nil
}

func createDemoWorkloads(ctx context.Context, client kubernetes.Interface) error {
	pool := deployment("echo", 0, map[string]string{api.LabelPool: "echo"}, corev1.Container{Name: "framework", Image: "ghcr.io/runplane/framework-echo:dev"})
	pool.Annotations = map[string]string{
		api.AnnotationMinAvailable: "0", api.AnnotationMaxReplicas: "4", api.AnnotationIdleTimeout: "60s",
	}
	pool.Spec.Template.Annotations = map[string]string{api.AnnotationConcurrency: "2"}
	// Stock in its own namespace, as the chart keeps it (the webhook admits
	// placeholders nowhere else).
	stock := deployment("stock-g1-1", 4, map[string]string{api.LabelStock: "g1.1"}, corev1.Container{Name: "pause", Image: "registry.k8s.io/pause:3.10"})
	stock.Namespace = api.DefaultStockNamespace
	for _, d := range []*appsv1.Deployment{pool, stock} {
		if err := create(ctx, client, d); err != nil {
			return err
		}
	}
	return nil
}

func deployment(name string, replicas int32, labels map[string]string, container corev1.Container) *appsv1.Deployment {
	podLabels := map[string]string{"app": name}
	for k, v := range labels {
		podLabels[k] = v
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: demoNamespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{container}},
			},
		},
	}
}

func create(ctx context.Context, client kubernetes.Interface, d *appsv1.Deployment) error {
	_, err := client.AppsV1().Deployments(d.Namespace).Create(ctx, d, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating demo Deployment %s: %w", d.Name, err)
	}
	return nil
}
