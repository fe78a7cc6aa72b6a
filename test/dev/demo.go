package main

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/test/cluster"
)

// demoNamespace holds make dev's examples.
const demoNamespace = "demo"

// createDemo creates what the README's examples use: a serverless pool
// "echo" at zero replicas (its workers run framework-echo locally) and a
// stock of g1.1 placeholders the runplane-scheduler can take over.
func createDemo(ctx context.Context, c *cluster.Cluster) error {
	if err := c.CreateNamespace(ctx, demoNamespace); err != nil {
		return err
	}
	client := c.Client()
	pool := deployment("echo", 0, map[string]string{api.LabelPool: "echo"}, corev1.Container{Name: "framework", Image: "ghcr.io/runplane/framework-echo:dev"})
	pool.Annotations = map[string]string{
		api.AnnotationMinAvailable: "0", api.AnnotationMaxReplicas: "4", api.AnnotationIdleTimeout: "60s",
	}
	pool.Spec.Template.Annotations = map[string]string{api.AnnotationConcurrency: "2"}
	stock := deployment("stock-g1-1", 4, map[string]string{api.LabelStock: "g1.1"}, corev1.Container{Name: "pause", Image: "registry.k8s.io/pause:3.10"})
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
