// Package accessor publishes a read-only HTTP file browser for a PVC
// annotated runplane.io/accessor: enabled: a Deployment running
// runplane-accessor with the PVC mounted read-only, and a Service in front of
// it. The in-cluster URL and the phase are written back as the
// accessor-url and accessor-phase annotations; removing the annotation
// removes everything.
//
// A ReadWriteOnce volume can be mounted by Pods of one node only, so when a
// Pod already mounts such a PVC the accessor is pinned to that Pod's node.
package accessor

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/kubeevents"
)

// Port is where runplane-accessor listens in its container; the Service
// exposes it on port 80.
const Port = 8080

// dataMount is where the accessor container sees the PVC.
const dataMount = "/data"

// caMount is where the accessor container sees the API server's CA (the
// kube-root-ca.crt ConfigMap every namespace has): it asks the API server
// whether each caller may get the PVC, with the caller's own token.
const caMount = "/var/run/runplane/kube-ca"

// RootCAConfigMap is the ConfigMap kube-controller-manager publishes in
// every namespace with the cluster's CA bundle (key ca.crt).
const RootCAConfigMap = "kube-root-ca.crt"

// labelAccessorFor marks accessor objects and Pods with the PVC's UID.
const labelAccessorFor = api.Prefix + "accessor-for"

// indexClaims indexes Pods by the PVCs they mount.
const indexClaims = "runplane.accessorClaims"

// Options configure the accessor controller.
type Options struct {
	// Image runs runplane-accessor.
	Image string
	// ClusterDomain forms the URL (http://<svc>.<ns>.svc.<domain>/).
	ClusterDomain string
	// AllowedNamespaces selects the namespaces, besides the PVC's own, whose
	// Pods may reach an accessor (its NetworkPolicy); nil: only the PVC's.
	AllowedNamespaces *metav1.LabelSelector
}

// Reconciler keeps a PVC's accessor objects.
type Reconciler struct {
	client.Client
	Recorder events.EventRecorder
	Options
}

// Setup registers the accessor controller with the manager.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.Image == "" || opts.ClusterDomain == "" {
		return fmt.Errorf("accessor: Options.Image and Options.ClusterDomain are required")
	}
	rec, err := kubeevents.ForManager(mgr, "runplane-accessor")
	if err != nil {
		return fmt.Errorf("accessor: %w", err)
	}
	r := &Reconciler{Client: mgr.GetClient(), Recorder: rec, Options: opts}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, indexClaims, mountedClaims); err != nil {
		return fmt.Errorf("accessor: index: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("storage-accessor").
		For(&corev1.PersistentVolumeClaim{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			a := o.GetAnnotations()
			return a[api.AnnotationAccessor] != "" || a[api.AnnotationAccessorPhase] != "" || a[api.AnnotationAccessorURL] != ""
		}))).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&networkingv1.NetworkPolicy{}).
		// A Pod landing on a node decides where a ReadWriteOnce accessor goes.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			var reqs []reconcile.Request
			for _, name := range mountedClaims(o) {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}})
			}
			return reqs
		}), builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(e event.CreateEvent) bool { return e.Object.(*corev1.Pod).Spec.NodeName != "" },
			UpdateFunc: func(e event.UpdateEvent) bool {
				return e.ObjectOld.(*corev1.Pod).Spec.NodeName != e.ObjectNew.(*corev1.Pod).Spec.NodeName
			},
			DeleteFunc:  func(event.DeleteEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		Complete(r)
}

// mountedClaims indexes a Pod by the PVCs it mounts.
func mountedClaims(o client.Object) []string {
	pod, ok := o.(*corev1.Pod)
	if !ok || pod.Labels[labelAccessorFor] != "" {
		return nil // the accessor's own Pods do not pin it
	}
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return out
}

// Name is the accessor Deployment's and Service's name for a PVC (a DNS
// label: at most 63 characters).
func Name(pvc string) string {
	base, limit := "accessor-"+pvc, 63
	if len(base) <= limit && !strings.Contains(base, ".") {
		return base
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(pvc))
	hash := fmt.Sprintf("%08x", h.Sum32())
	base = strings.ReplaceAll(base, ".", "-")
	if len(base) > limit-9 {
		base = base[:limit-9]
	}
	return strings.TrimRight(base, "-") + "-" + hash
}

// URL is the in-cluster address of a PVC's accessor.
func URL(pvc, namespace, domain string) string {
	return fmt.Sprintf("http://%s.%s.svc.%s/", Name(pvc), namespace, domain)
}

// Reconcile creates, updates or removes a PVC's accessor.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pvc corev1.PersistentVolumeClaim
	if err := r.Get(ctx, req.NamespacedName, &pvc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pvc.DeletionTimestamp != nil {
		// The accessor's Pod holds the PVC's protection finalizer, and the
		// garbage collector waits for the PVC: remove the objects now.
		return reconcile.Result{}, r.deleteObjects(ctx, &pvc)
	}
	value := pvc.Annotations[api.AnnotationAccessor]
	if value != api.AccessorEnabled {
		if value != "" {
			r.Recorder.Eventf(&pvc, nil, corev1.EventTypeWarning, "AccessorInvalid", "Accessor",
				"%s: %q is not allowed (allowed: %q); no accessor is published", api.AnnotationAccessor, value, api.AccessorEnabled)
		}
		return reconcile.Result{}, r.remove(ctx, &pvc)
	}
	node, err := r.pinnedNode(ctx, &pvc)
	if err != nil {
		return reconcile.Result{}, err
	}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: Name(pvc.Name), Namespace: pvc.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, dep, func() error { return r.deployment(&pvc, dep, node) }); err != nil {
		return reconcile.Result{}, fmt.Errorf("accessor Deployment %s: %w", dep.Name, err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: Name(pvc.Name), Namespace: pvc.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, svc, func() error { return r.service(&pvc, svc) }); err != nil {
		return reconcile.Result{}, fmt.Errorf("accessor Service %s: %w", svc.Name, err)
	}
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: Name(pvc.Name), Namespace: pvc.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, r.Client, np, func() error { return r.networkPolicy(&pvc, np) }); err != nil {
		return reconcile.Result{}, fmt.Errorf("accessor NetworkPolicy %s: %w", np.Name, err)
	}
	phase := api.AccessorPending
	if dep.Status.AvailableReplicas > 0 {
		phase = api.AccessorReady
	}
	for _, c := range dep.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
			phase = api.AccessorFailed
		}
	}
	return reconcile.Result{}, r.annotate(ctx, &pvc, URL(pvc.Name, pvc.Namespace, r.ClusterDomain), phase)
}

// pinnedNode returns the node of a running Pod that mounts a ReadWriteOnce
// PVC, or "" when the accessor may go anywhere.
func (r *Reconciler) pinnedNode(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (string, error) {
	modes := pvc.Status.AccessModes
	if len(modes) == 0 {
		modes = pvc.Spec.AccessModes
	}
	if !slices.Contains(modes, corev1.ReadWriteOnce) || slices.Contains(modes, corev1.ReadWriteMany) || slices.Contains(modes, corev1.ReadOnlyMany) {
		return "", nil
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(pvc.Namespace), client.MatchingFields{indexClaims: pvc.Name}); err != nil {
		return "", fmt.Errorf("listing Pods that mount PVC %s: %w", pvc.Name, err)
	}
	var nodes []string
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			nodes = append(nodes, p.Spec.NodeName)
		}
	}
	if len(nodes) == 0 {
		return "", nil
	}
	sort.Strings(nodes)
	return nodes[0], nil
}

func (r *Reconciler) labels(pvc *corev1.PersistentVolumeClaim) map[string]string {
	return map[string]string{
		api.LabelManagedBy:       api.ManagedByController,
		"app.kubernetes.io/name": "runplane-accessor",
		labelAccessorFor:         string(pvc.UID),
	}
}

func (r *Reconciler) deployment(pvc *corev1.PersistentVolumeClaim, dep *appsv1.Deployment, node string) error {
	labels := r.labels(pvc)
	dep.Labels = labels
	var affinity *corev1.Affinity
	if node != "" {
		// matchFields on metadata.name names the node itself; the hostname
		// label need not equal the node name.
		affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
				Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}}
	}
	if dep.CreationTimestamp.IsZero() {
		dep.Spec.Selector = &metav1.LabelSelector{MatchLabels: labels} // immutable once created
	}
	dep.Spec.Replicas = ptr.To[int32](1)
	dep.Spec.Template = corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			Affinity: affinity,
			// The accessor needs no API access: pinned to the namespace's
			// default ServiceAccount, without its token.
			// Callers authenticate with their own token, which the
			// accessor only forwards to the API server
			// (internal/filebrowser/claimauth).
			ServiceAccountName:           "default",
			AutomountServiceAccountToken: ptr.To(false),
			// Pod Security "restricted".
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(api.ImageUID), RunAsGroup: ptr.To(api.ImageUID),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:  "accessor",
				Image: r.Image,
				Command: []string{"runplane-accessor", "--root", dataMount, "--listen", fmt.Sprintf(":%d", Port),
					"--namespace", pvc.Namespace, "--claim", pvc.Name, "--ca-file", caMount + "/ca.crt"},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: Port, Protocol: corev1.ProtocolTCP}},
				// Every HTTP request needs a caller's token, the kubelet has
				// none: readiness is the listening socket.
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{
					Port: intstr.FromString("http")}}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "data", MountPath: dataMount, ReadOnly: true},
					{Name: "kube-ca", MountPath: caMount, ReadOnly: true},
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				// A namespace with a compute ResourceQuota admits only
				// Pods whose containers carry requests and limits.
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("256Mi")},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name, ReadOnly: true}}},
				// A ConfigMap, public by nature: the CA, never a Secret.
				{Name: "kube-ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: RootCAConfigMap},
					Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}}},
			},
		},
	}
	return controllerutil.SetControllerReference(pvc, dep, r.Scheme())
}

func (r *Reconciler) service(pvc *corev1.PersistentVolumeClaim, svc *corev1.Service) error {
	labels := r.labels(pvc)
	svc.Labels = labels
	svc.Spec.Selector = labels
	svc.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}}
	return controllerutil.SetControllerReference(pvc, svc, r.Scheme())
}

// networkPolicy admits to the accessor only Pods of the PVC's namespace and
// of AllowedNamespaces, on its HTTP port: every request is authorized too
// (a bearer token with get on the PVC), this keeps the rest of the cluster
// from even reaching it.
func (r *Reconciler) networkPolicy(pvc *corev1.PersistentVolumeClaim, np *networkingv1.NetworkPolicy) error {
	labels := r.labels(pvc)
	np.Labels = labels
	from := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}
	if r.AllowedNamespaces != nil {
		from = append(from, networkingv1.NetworkPolicyPeer{NamespaceSelector: r.AllowedNamespaces.DeepCopy()})
	}
	port := intstr.FromString("http")
	np.Spec = networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: labels},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: from, Ports: []networkingv1.NetworkPolicyPort{{Port: &port}}}},
	}
	return controllerutil.SetControllerReference(pvc, np, r.Scheme())
}

// remove deletes the accessor objects and the written annotations.
func (r *Reconciler) remove(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if err := r.deleteObjects(ctx, pvc); err != nil {
		return err
	}
	return r.annotate(ctx, pvc, "", "")
}

func (r *Reconciler) deleteObjects(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	name := types.NamespacedName{Namespace: pvc.Namespace, Name: Name(pvc.Name)}
	for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &networkingv1.NetworkPolicy{}} {
		if err := r.Get(ctx, name, obj); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("getting accessor object %s: %w", name.Name, err)
		}
		if !metav1.IsControlledBy(obj, pvc) {
			continue // not ours: never delete a user's object of the same name
		}
		if err := r.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting accessor object %s: %w", name.Name, err)
		}
	}
	return nil
}

func (r *Reconciler) annotate(ctx context.Context, pvc *corev1.PersistentVolumeClaim, url, phase string) error {
	a := pvc.Annotations
	if a[api.AnnotationAccessorURL] == url && a[api.AnnotationAccessorPhase] == phase {
		return nil
	}
	old := a[api.AnnotationAccessorPhase]
	patch := client.MergeFrom(pvc.DeepCopy())
	if pvc.Annotations == nil {
		pvc.Annotations = map[string]string{}
	}
	for k, v := range map[string]string{api.AnnotationAccessorURL: url, api.AnnotationAccessorPhase: phase} {
		if v == "" {
			delete(pvc.Annotations, k)
		} else {
			pvc.Annotations[k] = v
		}
	}
	if err := r.Patch(ctx, pvc, patch); err != nil {
		return fmt.Errorf("writing accessor status of PVC %s: %w", pvc.Name, err)
	}
	if phase != old {
		msg := "accessor removed"
		if phase != "" {
			msg = fmt.Sprintf("accessor %s at %s", phase, url)
		}
		kind := corev1.EventTypeNormal
		if phase == api.AccessorFailed {
			kind = corev1.EventTypeWarning // found by `kubectl get events --field-selector type=Warning`
		}
		r.Recorder.Eventf(pvc, nil, kind, "Accessor"+phaseOr(phase, "Removed"), "Accessor", "%s", msg)
	}
	return nil
}

func phaseOr(p, def string) string {
	if p == "" {
		return def
	}
	return p
}
