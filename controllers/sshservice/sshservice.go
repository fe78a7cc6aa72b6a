// Package sshservice publishes the SSH server of Pods labelled
// runplane.io/ssh: enabled. For each such Pod it keeps a Service owned by the
// Pod (ClusterIP by default; NodePort or LoadBalancer by the annotation
// runplane.io/ssh-service-type) that selects exactly that Pod through the
// label runplane.io/ssh-pod=<pod UID>, and writes the annotation
// runplane.io/ssh-endpoint on the Pod saying how to connect.
package sshservice

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/kubeevents"
)

// ServicePort is the port the SSH Service exposes; it forwards to the
// server's api.SSHPort (in the Pod's main container).
const ServicePort = 22

// Event reasons.
const (
	ReasonInvalidServiceType = "InvalidSSHServiceType"
	ReasonServiceConflict    = "SSHServiceConflict"
	ReasonServiceCreated     = "SSHServiceCreated"
)

// allowedTypes are the values of runplane.io/ssh-service-type.
var allowedTypes = []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer}

// Reconciler keeps one SSH Service per SSH-enabled Pod.
type Reconciler struct {
	client.Client
	Recorder events.EventRecorder
}

// Setup registers the controller with the manager. The manager's Service
// cache may be restricted to app.kubernetes.io/managed-by=runplane-controller:
// the Services this controller creates carry that label.
func Setup(mgr ctrl.Manager) error {
	rec, err := kubeevents.ForManager(mgr, "runplane-ssh-service")
	if err != nil {
		return fmt.Errorf("sshservice: %w", err)
	}
	r := &Reconciler{Client: mgr.GetClient(), Recorder: rec}
	return r.SetupWithManager(mgr)
}

// SetupWithManager registers r with the manager.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("ssh-service").
		// Pods that want SSH, and Pods that had it (to clean up after the
		// label is removed).
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			_, had := o.GetLabels()[api.LabelSSHPod]
			return had || o.GetLabels()[api.LabelSSH] == api.SSHEnabled
		}))).
		// A Service's status (LoadBalancer ingress) and spec (node port) feed
		// the endpoint annotation.
		Owns(&corev1.Service{}).
		Complete(r)
}

// ServiceName is the name of a Pod's SSH Service: "<pod>-ssh" when that is a
// valid Service name (a DNS-1035 label), otherwise a sanitized, truncated
// form with a hash of the Pod name so distinct Pods never collide.
func ServiceName(pod string) string {
	name := pod + "-ssh"
	if len(validation.IsDNS1035Label(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(pod))
	suffix := "-" + hex.EncodeToString(sum[:4]) + "-ssh"
	base := strings.ReplaceAll(strings.ToLower(pod), ".", "-")
	if base == "" || base[0] < 'a' || base[0] > 'z' {
		base = "ssh-" + base
	}
	base = strings.TrimRight(base[:min(len(base), validation.DNS1035LabelMaxLength-len(suffix))], "-")
	return base + suffix
}

// ParseServiceType reads the runplane.io/ssh-service-type value ("" is
// ClusterIP). The error names the annotation and the allowed values.
func ParseServiceType(v string) (corev1.ServiceType, error) {
	if v == "" {
		return corev1.ServiceTypeClusterIP, nil
	}
	for _, t := range allowedTypes {
		if string(t) == v {
			return t, nil
		}
	}
	names := make([]string, len(allowedTypes))
	for i, t := range allowedTypes {
		names[i] = string(t)
	}
	return "", fmt.Errorf("annotation %s: invalid value %q; allowed values: %s (default %s)",
		api.AnnotationSSHServiceType, v, strings.Join(names, ", "), corev1.ServiceTypeClusterIP)
}

// Endpoint says how to connect to a Pod through its SSH Service: the
// in-cluster DNS name for ClusterIP (and for a LoadBalancer still waiting
// for its address), the node's address and node port for NodePort, the
// load balancer's address for LoadBalancer. Any user name is accepted by
// the sidecar; "user" stands for the caller's choice.
func Endpoint(svc *corev1.Service, hostIP string) string {
	inCluster := fmt.Sprintf("ssh -p %d user@%s.%s.svc", ServicePort, svc.Name, svc.Namespace)
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		if len(svc.Spec.Ports) == 0 || svc.Spec.Ports[0].NodePort == 0 {
			return inCluster
		}
		if hostIP == "" {
			hostIP = "<node-address>"
		}
		return fmt.Sprintf("ssh -p %d user@%s", svc.Spec.Ports[0].NodePort, hostIP)
	case corev1.ServiceTypeLoadBalancer:
		for _, in := range svc.Status.LoadBalancer.Ingress {
			addr := in.IP
			if addr == "" {
				addr = in.Hostname
			}
			if addr != "" {
				return fmt.Sprintf("ssh -p %d user@%s", ServicePort, addr)
			}
		}
	}
	return inCluster
}

// Reconcile converges one Pod's SSH Service and endpoint annotation.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pod corev1.Pod
	if err := r.Get(ctx, req.NamespacedName, &pod); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pod.DeletionTimestamp != nil {
		return ctrl.Result{}, nil // the Service goes with the Pod (owner reference)
	}
	if pod.Labels[api.LabelSSH] != api.SSHEnabled {
		return ctrl.Result{}, r.disable(ctx, &pod)
	}
	svcType, err := ParseServiceType(pod.Annotations[api.AnnotationSSHServiceType])
	if err != nil {
		r.Recorder.Eventf(&pod, nil, corev1.EventTypeWarning, ReasonInvalidServiceType, "PublishSSH", "%s; no SSH Service is published", err.Error())
		if err := r.deleteService(ctx, &pod); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.patchPod(ctx, &pod, string(pod.UID), "")
	}
	// Label first, so the Service selects the Pod as soon as it exists.
	if err := r.patchPod(ctx, &pod, string(pod.UID), pod.Annotations[api.AnnotationSSHEndpoint]); err != nil {
		return ctrl.Result{}, err
	}
	svc, err := r.ensureService(ctx, &pod, svcType)
	if err != nil || svc == nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.patchPod(ctx, &pod, string(pod.UID), Endpoint(svc, pod.Status.HostIP))
}

func ownerRef(pod *corev1.Pod) metav1.OwnerReference {
	// No BlockOwnerDeletion: it would need update on pods/finalizers, and
	// nothing waits on the Service when a Pod is deleted.
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true)}
}

// ownedBy reports whether svc belongs to a Pod of this name (any UID: a
// StatefulSet Pod recreated under the same name takes its Service over).
func ownedBy(svc *corev1.Service, pod *corev1.Pod) (owned, sameUID bool) {
	for _, o := range svc.OwnerReferences {
		if o.Kind == "Pod" && o.APIVersion == "v1" && o.Name == pod.Name && ptr.Deref(o.Controller, false) {
			return true, o.UID == pod.UID
		}
	}
	return false, false
}

func (r *Reconciler) ensureService(ctx context.Context, pod *corev1.Pod, svcType corev1.ServiceType) (*corev1.Service, error) {
	name := ServiceName(pod.Name)
	var svc corev1.Service
	err := r.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, &svc)
	if apierrors.IsNotFound(err) {
		// The cache only holds managed Services: a user's Service of the same
		// name shows up as AlreadyExists on create.
		svc = corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: name}}
		r.desired(&svc, pod, svcType)
		if err := r.Create(ctx, &svc); err != nil {
			if apierrors.IsAlreadyExists(err) {
				r.conflict(pod, name)
				return nil, nil
			}
			return nil, fmt.Errorf("create Service %s/%s: %w", pod.Namespace, name, err)
		}
		r.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, ReasonServiceCreated, "PublishSSH", "SSH Service %s (%s) created", name, svcType)
		return &svc, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get Service %s/%s: %w", pod.Namespace, name, err)
	}
	if owned, _ := ownedBy(&svc, pod); !owned {
		r.conflict(pod, name)
		return nil, nil
	}
	before := svc.DeepCopy()
	r.desired(&svc, pod, svcType)
	if equality.Semantic.DeepEqual(before, &svc) {
		return &svc, nil
	}
	if err := r.Update(ctx, &svc); err != nil {
		return nil, fmt.Errorf("update Service %s/%s: %w", pod.Namespace, name, err)
	}
	return &svc, nil
}

func (r *Reconciler) conflict(pod *corev1.Pod, name string) {
	r.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonServiceConflict, "PublishSSH",
		"Service %s exists and is not owned by this Pod; rename or delete it to publish SSH", name)
}

// desired writes the controller's fields into svc, keeping what the API
// server allocated (cluster IP, node port of an unchanged type).
func (r *Reconciler) desired(svc *corev1.Service, pod *corev1.Pod, svcType corev1.ServiceType) {
	if svc.Labels == nil {
		svc.Labels = map[string]string{}
	}
	svc.Labels[api.LabelManagedBy] = api.ManagedByController
	svc.Labels[api.LabelSSHPod] = string(pod.UID)
	svc.OwnerReferences = []metav1.OwnerReference{ownerRef(pod)}
	svc.Spec.Type = svcType
	svc.Spec.Selector = map[string]string{api.LabelSSHPod: string(pod.UID)}
	var nodePort int32
	if svcType != corev1.ServiceTypeClusterIP && len(svc.Spec.Ports) == 1 {
		nodePort = svc.Spec.Ports[0].NodePort
	}
	svc.Spec.Ports = []corev1.ServicePort{{
		Name: "ssh", Protocol: corev1.ProtocolTCP, Port: ServicePort,
		TargetPort: intstr.FromInt32(api.SSHPort), NodePort: nodePort,
	}}
}

func (r *Reconciler) deleteService(ctx context.Context, pod *corev1.Pod) error {
	var svc corev1.Service
	name := ServiceName(pod.Name)
	if err := r.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, &svc); err != nil {
		return client.IgnoreNotFound(err)
	}
	if owned, _ := ownedBy(&svc, pod); !owned {
		return nil
	}
	if err := r.Delete(ctx, &svc, client.Preconditions{UID: &svc.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Service %s/%s: %w", pod.Namespace, name, err)
	}
	return nil
}

// disable removes what the controller added to a Pod that no longer asks
// for SSH.
func (r *Reconciler) disable(ctx context.Context, pod *corev1.Pod) error {
	if err := r.deleteService(ctx, pod); err != nil {
		return err
	}
	return r.patchPod(ctx, pod, "", "")
}

// patchPod sets (or, when empty, removes) the selector label and the
// endpoint annotation with a merge patch, touching nothing else.
func (r *Reconciler) patchPod(ctx context.Context, pod *corev1.Pod, selector, endpoint string) error {
	value := func(v string) any {
		if v == "" {
			return nil // null deletes the key in a merge patch
		}
		return v
	}
	labels, annotations := map[string]any{}, map[string]any{}
	if pod.Labels[api.LabelSSHPod] != selector {
		labels[api.LabelSSHPod] = value(selector)
	}
	if pod.Annotations[api.AnnotationSSHEndpoint] != endpoint {
		annotations[api.AnnotationSSHEndpoint] = value(endpoint)
	}
	if len(labels) == 0 && len(annotations) == 0 {
		return nil
	}
	meta := map[string]any{}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return fmt.Errorf("encode Pod patch: %w", err)
	}
	if err := r.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("patch Pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	log.FromContext(ctx).V(1).Info("ssh pod patched", "endpoint", endpoint, "selector", selector != "")
	return nil
}
