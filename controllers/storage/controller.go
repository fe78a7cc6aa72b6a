package storage

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/kubeevents"
	"github.com/runplane/runplane/pvcspec"
)

// Workspace is where a prepare Job sees the PVC it fills.
const Workspace = "/workspace"

// sourceMount is where a copy Job sees its (read-only) source PVC.
const sourceMount = "/source"

// labelPVCUID marks a prepare Job with the UID of the PVC it prepares.
const labelPVCUID = api.Prefix + "prepare-pvc-uid"

// indexFromPVC indexes PVCs by the source they are prepared from.
const indexFromPVC = "runplane.prepareFromPVC"

// jobNameLabel is set by the Job controller on the Pods of a Job.
const jobNameLabel = "batch.kubernetes.io/job-name"

// Options configure the storage controller.
type Options struct {
	// Image runs runplane-copy for prepare-from-pvc Jobs.
	Image string
	// Deadline is the Jobs' activeDeadlineSeconds.
	Deadline time.Duration
	// ImagePullTimeout fails an attempt whose Pod cannot pull its image.
	ImagePullTimeout time.Duration
}

// Reconciler drives a PVC's preparation.
type Reconciler struct {
	client.Client
	Reader   client.Reader // uncached, to tell "not created" from "not seen yet"
	Recorder events.EventRecorder
	Clock    clock.PassiveClock // measures how long a Pod has failed to pull its image
	Options
}

// Setup registers the storage controller with the manager.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.Image == "" {
		return fmt.Errorf("storage: Options.Image is required")
	}
	rec, err := kubeevents.ForManager(mgr, "runplane-storage")
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	r := &Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: rec, Clock: clock.RealClock{}, Options: opts}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.PersistentVolumeClaim{}, indexFromPVC,
		func(o client.Object) []string {
			if src := o.GetAnnotations()[api.AnnotationPrepareFromPVC]; src != "" {
				return []string{src}
			}
			return nil
		}); err != nil {
		return fmt.Errorf("storage: index: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("storage-prepare").
		For(&corev1.PersistentVolumeClaim{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			pvc, ok := o.(*corev1.PersistentVolumeClaim)
			return ok && (pvcspec.WantsPreparation(pvc) || pvc.Annotations[api.AnnotationPreparePhase] != "")
		}))).
		Owns(&batchv1.Job{}).
		// A copy waits for its source: wake the PVCs prepared from this one.
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(r.dependents)).
		// Pods carry the failure reasons (image pull, exit codes).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.podOwner),
			builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[jobNameLabel] != "" }))).
		Complete(r)
}

func (r *Reconciler) dependents(ctx context.Context, o client.Object) []reconcile.Request {
	var list corev1.PersistentVolumeClaimList
	if err := r.List(ctx, &list, client.InNamespace(o.GetNamespace()), client.MatchingFields{indexFromPVC: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "listing PVCs prepared from", "source", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, p := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
	}
	return reqs
}

// podOwner maps a Job Pod to the PVC that owns its Job.
func (r *Reconciler) podOwner(ctx context.Context, o client.Object) []reconcile.Request {
	var job batchv1.Job
	if err := r.Get(ctx, types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetLabels()[jobNameLabel]}, &job); err != nil {
		return nil // not one of ours (the Job cache holds runplane's Jobs only)
	}
	if ref := metav1.GetControllerOf(&job); ref != nil && ref.Kind == "PersistentVolumeClaim" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: job.Namespace, Name: ref.Name}}}
	}
	return nil
}

// Reconcile moves one PVC's preparation forward.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var pvc corev1.PersistentVolumeClaim
	if err := r.Get(ctx, req.NamespacedName, &pvc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pvc.DeletionTimestamp != nil {
		// Owner references are not enough: the PVC's protection finalizer
		// waits for every scheduled Pod that mounts it to be deleted, even
		// finished Job Pods, and the garbage collector waits for the PVC.
		return reconcile.Result{}, r.deleteJobs(ctx, &pvc)
	}
	spec, attempt, ok, err := desired(&pvc)
	if !ok {
		return reconcile.Result{}, nil
	}
	st := pvcspec.StatusOf(&pvc)
	if err != nil {
		// Admission denies these; a PVC created before the webhook still
		// deserves a clear status rather than silence.
		if attempt == "" {
			attempt = st.ObservedAttempt
		}
		return reconcile.Result{}, r.report(ctx, &pvc, pvcspec.Status{Phase: api.PhaseFailed, Message: err.Error(), ObservedAttempt: attempt}, "PrepareInvalid")
	}
	jobName := JobName(pvc.Name, spec.Attempt)
	if st.ObservedAttempt == attempt && (st.Phase == api.PhaseSucceeded || st.Phase == api.PhaseFailed) {
		return reconcile.Result{}, nil // terminal until the attempt is bumped
	}
	if err := r.stopOtherAttempts(ctx, &pvc, jobName); err != nil {
		return reconcile.Result{}, err
	}

	var job batchv1.Job
	err = r.Get(ctx, types.NamespacedName{Namespace: pvc.Namespace, Name: jobName}, &job)
	if apierrors.IsNotFound(err) {
		// The cache may lag behind our own create: ask the API server.
		err = r.Reader.Get(ctx, types.NamespacedName{Namespace: pvc.Namespace, Name: jobName}, &job)
	}
	switch {
	case apierrors.IsNotFound(err):
		return r.start(ctx, &pvc, spec, st, jobName)
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("getting Job %s: %w", jobName, err)
	}
	if ref := metav1.GetControllerOf(&job); ref == nil || ref.UID != pvc.UID {
		// A Job of an earlier PVC of the same name, waiting for the garbage
		// collector: never adopt it, wait for it to go.
		return reconcile.Result{RequeueAfter: 2 * time.Second}, r.report(ctx, &pvc, pvcspec.Status{Phase: api.PhasePending, Job: jobName,
			Message: fmt.Sprintf("waiting for Job %s of a deleted PVC to be removed", jobName), ObservedAttempt: attempt}, "")
	}
	return r.observe(ctx, &pvc, &job, attempt, st)
}

// start creates the attempt's Job once its source is ready.
func (r *Reconciler) start(ctx context.Context, pvc *corev1.PersistentVolumeClaim, spec pvcspec.Spec, st pvcspec.Status, jobName string) (reconcile.Result, error) {
	attempt := strconv.FormatInt(spec.Attempt, 10)
	if st.ObservedAttempt == attempt && st.Job == jobName && (st.Phase == api.PhaseRunning || (st.Phase == api.PhasePending && st.Job != "")) {
		// We created it and someone deleted it before it finished.
		return reconcile.Result{}, r.report(ctx, pvc, pvcspec.Status{Phase: api.PhaseFailed, Job: jobName, ObservedAttempt: attempt,
			Message: fmt.Sprintf("Job %s was deleted before it finished; bump %s to retry", jobName, api.AnnotationPrepareAttempt)}, "PrepareFailed")
	}
	if spec.FromPVC != "" {
		var src corev1.PersistentVolumeClaim
		err := r.Get(ctx, types.NamespacedName{Namespace: pvc.Namespace, Name: spec.FromPVC}, &src)
		waiting := ""
		switch {
		case apierrors.IsNotFound(err):
			waiting = fmt.Sprintf("waiting for source PVC %s to exist", spec.FromPVC)
		case err != nil:
			return reconcile.Result{}, fmt.Errorf("getting source PVC %s: %w", spec.FromPVC, err)
		case !pvcspec.Ready(&src):
			phase := pvcspec.StatusOf(&src).Phase
			if phase == "" {
				phase = api.PhasePending
			}
			waiting = fmt.Sprintf("waiting for source PVC %s to be prepared (its phase: %s)", spec.FromPVC, phase)
		}
		if waiting != "" {
			// A source that (through others) waits for this PVC never
			// becomes ready: report the cycle rather than wait forever.
			cycle, long, err := r.sourceCycle(ctx, pvc, spec.FromPVC)
			if err != nil {
				return reconcile.Result{}, err
			}
			if cycle != nil {
				return reconcile.Result{}, r.report(ctx, pvc, pvcspec.Status{Phase: api.PhaseFailed, Message: cycleMessage(cycle, long), ObservedAttempt: attempt}, "PrepareCycle")
			}
			return reconcile.Result{}, r.report(ctx, pvc, pvcspec.Status{Phase: api.PhasePending, Message: waiting, ObservedAttempt: attempt}, "PrepareWaiting")
		}
	}
	job := r.jobFor(pvc, spec, jobName)
	if spec.FromImage != "" {
		restricted, err := r.enforcesRestricted(ctx, pvc.Namespace)
		if err != nil {
			return reconcile.Result{}, err
		}
		if restricted {
			restrictImageJob(job)
		}
	}
	if err := controllerutil.SetControllerReference(pvc, job, r.Scheme()); err != nil {
		return reconcile.Result{}, fmt.Errorf("owning Job %s: %w", jobName, err)
	}
	if err := r.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return reconcile.Result{}, fmt.Errorf("creating Job %s: %w", jobName, err)
	}
	what := "image " + spec.FromImage
	if spec.FromPVC != "" {
		what = "PVC " + spec.FromPVC
	}
	return reconcile.Result{}, r.report(ctx, pvc, pvcspec.Status{Phase: api.PhasePending, Job: jobName, ObservedAttempt: attempt,
		Message: fmt.Sprintf("attempt %s: Job %s prepares from %s", attempt, jobName, what)}, "PrepareStarted")
}

func (r *Reconciler) jobFor(pvc *corev1.PersistentVolumeClaim, spec pvcspec.Spec, name string) *batchv1.Job {
	labels := map[string]string{api.LabelManagedBy: api.ManagedByController, labelPVCUID: string(pvc.UID)}
	volumes := []corev1.Volume{{Name: "workspace", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}}}
	mounts := []corev1.VolumeMount{{Name: "workspace", MountPath: Workspace}}
	c := corev1.Container{Name: "prepare", Image: spec.FromImage, Command: spec.Command, Args: spec.Args, WorkingDir: Workspace,
		SecurityContext: imageContainerSecurity()}
	podSecurity := &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	if spec.FromPVC != "" {
		volumes = append(volumes, corev1.Volume{Name: "source", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: spec.FromPVC, ReadOnly: true}}})
		mounts = append(mounts, corev1.VolumeMount{Name: "source", MountPath: sourceMount, ReadOnly: true})
		c = corev1.Container{Name: "copy", Image: r.Image,
			Command:         []string{"runplane-copy", "--from", sourceMount, "--to", Workspace},
			SecurityContext: copyContainerSecurity()}
		podSecurity = copyPodSecurity()
	}
	c.VolumeMounts = mounts
	c.Resources = jobResources()
	var deadline *int64
	if r.Deadline > 0 {
		deadline = ptr.To(int64(r.Deadline.Seconds()))
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: pvc.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To[int32](0), // a failure is final: recovery is the user's explicit bump
			ActiveDeadlineSeconds: deadline,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					// The copier and the image's own files need no API access:
					// the namespace's default ServiceAccount, pinned, and no token.
					ServiceAccountName:           "default",
					AutomountServiceAccountToken: ptr.To(false),
					RestartPolicy:                corev1.RestartPolicyNever,
					SecurityContext:              podSecurity,
					Containers:                   []corev1.Container{c},
					Volumes:                      volumes,
				},
			},
		},
	}
}

// stopOtherAttempts deletes still-running Jobs of earlier attempts, so two
// attempts never write the volume at once. Finished ones stay as history
// (the PVC's deletion removes them).
func (r *Reconciler) stopOtherAttempts(ctx context.Context, pvc *corev1.PersistentVolumeClaim, current string) error {
	var jobs batchv1.JobList
	if err := r.List(ctx, &jobs, client.InNamespace(pvc.Namespace), client.MatchingLabels{labelPVCUID: string(pvc.UID)}); err != nil {
		return fmt.Errorf("listing prepare Jobs: %w", err)
	}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if j.Name == current || j.DeletionTimestamp != nil || finished(j) != "" {
			continue
		}
		if err := r.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("stopping Job %s of an earlier attempt: %w", j.Name, err)
		}
		r.Recorder.Eventf(pvc, j, corev1.EventTypeNormal, "PrepareSuperseded", "Prepare", "stopped Job %s: a new attempt started", j.Name)
	}
	return nil
}

func (r *Reconciler) deleteJobs(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	var jobs batchv1.JobList
	if err := r.List(ctx, &jobs, client.InNamespace(pvc.Namespace), client.MatchingLabels{labelPVCUID: string(pvc.UID)}); err != nil {
		return fmt.Errorf("listing prepare Jobs: %w", err)
	}
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if j.DeletionTimestamp != nil {
			continue
		}
		if err := r.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Job %s of a deleted PVC: %w", j.Name, err)
		}
	}
	return nil
}

// finished returns the Job's terminal condition type, or "".
func finished(j *batchv1.Job) batchv1.JobConditionType {
	for _, c := range j.Status.Conditions {
		if c.Status == corev1.ConditionTrue && (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) {
			return c.Type
		}
	}
	return ""
}

// observe maps the Job and its Pods to the PVC's phase.
func (r *Reconciler) observe(ctx context.Context, pvc *corev1.PersistentVolumeClaim, job *batchv1.Job, attempt string, st pvcspec.Status) (reconcile.Result, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{jobNameLabel: job.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing Pods of Job %s: %w", job.Name, err)
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].CreationTimestamp.Before(&pods.Items[j].CreationTimestamp) })
	next := pvcspec.Status{Job: job.Name, ObservedAttempt: attempt}
	switch finished(job) {
	case batchv1.JobComplete:
		next.Phase, next.Message = api.PhaseSucceeded, fmt.Sprintf("attempt %s: Job %s succeeded", attempt, job.Name)
		return reconcile.Result{}, r.report(ctx, pvc, next, "PrepareSucceeded")
	case batchv1.JobFailed:
		next.Phase, next.Message = api.PhaseFailed, failureMessage(job, pods.Items, st.Message)
		return reconcile.Result{}, r.report(ctx, pvc, next, "PrepareFailed")
	}
	next.Phase, next.Message = api.PhasePending, fmt.Sprintf("attempt %s: Job %s is waiting for its Pod", attempt, job.Name)
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodRunning {
			next.Phase, next.Message = api.PhaseRunning, fmt.Sprintf("attempt %s: Job %s is running (Pod %s)", attempt, job.Name, p.Name)
		}
		if problem, since, fatal := pullProblem(p); problem != "" {
			next.Message = fmt.Sprintf("attempt %s: Pod %s: %s", attempt, p.Name, problem)
			waited := r.Clock.Since(since)
			if fatal || waited >= r.ImagePullTimeout {
				// A Job would wait for the image until its deadline; the
				// user learns nothing more by waiting, so end the attempt.
				if err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
					return reconcile.Result{}, fmt.Errorf("stopping Job %s: %w", job.Name, err)
				}
				next.Phase = api.PhaseFailed
				next.Message = fmt.Sprintf("attempt %s: image pull failed: Pod %s: %s", attempt, p.Name, problem)
				return reconcile.Result{}, r.report(ctx, pvc, next, "PrepareFailed")
			}
			return reconcile.Result{RequeueAfter: r.ImagePullTimeout - waited}, r.report(ctx, pvc, next, "")
		}
	}
	reason := ""
	if next.Phase == api.PhaseRunning {
		reason = "PrepareRunning"
	}
	return reconcile.Result{}, r.report(ctx, pvc, next, reason)
}

// pullProblem describes a Pod that cannot get its image: since when, and
// whether retrying can never help.
func pullProblem(p *corev1.Pod) (string, time.Time, bool) {
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		w := cs.State.Waiting
		if w == nil {
			continue
		}
		switch w.Reason {
		case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable":
			since := p.CreationTimestamp.Time
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
					since = c.LastTransitionTime.Time
				}
			}
			fatal := w.Reason == "InvalidImageName" || w.Reason == "ErrImageNeverPull"
			return fmt.Sprintf("container %s (image %s): %s: %s", cs.Name, cs.Image, w.Reason, w.Message), since, fatal
		}
	}
	return "", time.Time{}, false
}

// failureMessage explains a failed Job from its condition and its Pods; prev
// (the last message written) keeps a pull problem seen before the Job's
// deadline removed the Pod.
func failureMessage(job *batchv1.Job, pods []corev1.Pod, prev string) string {
	var parts []string
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			parts = append(parts, fmt.Sprintf("Job %s failed: %s: %s", job.Name, c.Reason, c.Message))
		}
	}
	found := false
	for i := range pods {
		if s := podFailure(&pods[i]); s != "" {
			parts = append(parts, s)
			found = true
		}
	}
	if !found && strings.Contains(prev, "Pod ") && !strings.Contains(prev, "succeeded") && !strings.Contains(prev, "is running") && !strings.Contains(prev, "waiting for its Pod") {
		parts = append(parts, "last seen: "+prev)
	}
	parts = append(parts, fmt.Sprintf("bump %s to retry", api.AnnotationPrepareAttempt))
	return strings.Join(parts, "; ")
}

func podFailure(p *corev1.Pod) string {
	var parts []string
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			s := fmt.Sprintf("container %s exited with code %d", cs.Name, t.ExitCode)
			if t.Reason != "" {
				s += " (" + t.Reason + ")"
			}
			if t.Message != "" {
				s += ": " + strings.TrimSpace(t.Message)
			}
			parts = append(parts, s)
		}
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
			parts = append(parts, fmt.Sprintf("container %s waiting: %s: %s", cs.Name, w.Reason, w.Message))
		}
	}
	if p.Status.Reason != "" {
		parts = append(parts, fmt.Sprintf("%s: %s", p.Status.Reason, p.Status.Message))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("Pod %s: %s", p.Name, strings.Join(parts, ", "))
}

// report writes the status annotations when they change, with an Event named
// reason (none when reason is empty).
func (r *Reconciler) report(ctx context.Context, pvc *corev1.PersistentVolumeClaim, next pvcspec.Status, reason string) error {
	cur := pvcspec.StatusOf(pvc)
	if cur == next {
		return nil
	}
	patch := client.MergeFrom(pvc.DeepCopy())
	if pvc.Annotations == nil {
		pvc.Annotations = map[string]string{}
	}
	set := func(k, v string) {
		if v == "" {
			delete(pvc.Annotations, k)
		} else {
			pvc.Annotations[k] = v
		}
	}
	set(api.AnnotationPreparePhase, next.Phase)
	set(api.AnnotationPrepareJob, next.Job)
	set(api.AnnotationPrepareMessage, next.Message)
	set(api.AnnotationPrepareObservedAttempt, next.ObservedAttempt)
	if err := r.Patch(ctx, pvc, patch); err != nil {
		return fmt.Errorf("writing prepare status of PVC %s: %w", pvc.Name, err)
	}
	log.FromContext(ctx).Info("prepare status", "phase", next.Phase, "job", next.Job, "attempt", next.ObservedAttempt, "message", next.Message)
	if reason != "" && (cur.Phase != next.Phase || cur.ObservedAttempt != next.ObservedAttempt || reason == "PrepareWaiting" && cur.Message != next.Message) {
		typ := corev1.EventTypeNormal
		if next.Phase == api.PhaseFailed {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(pvc, nil, typ, reason, "Prepare", "%s", next.Message)
	}
	return nil
}
