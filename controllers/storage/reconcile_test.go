package storage

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/eventstest"
	"github.com/runplane/runplane/pvcspec"
)

const (
	testNS  = "team"
	testUID = types.UID("pvc-uid")
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func claim(annotations map[string]string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{
		Name: "data", Namespace: testNS, UID: testUID, Annotations: annotations,
	}}
}

// job is a prepare Job of the PVC "data" for an attempt, with an optional
// terminal condition.
func job(attempt int64, cond batchv1.JobConditionType, reason string) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{
		Name: JobName("data", attempt), Namespace: testNS,
		Labels: map[string]string{labelPVCUID: string(testUID)},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "PersistentVolumeClaim", Name: "data", UID: testUID,
			Controller: ptr.To(true)}},
	}}
	if cond != "" {
		j.Status.Conditions = []batchv1.JobCondition{{Type: cond, Status: corev1.ConditionTrue, Reason: reason, Message: "done"}}
	}
	return j
}

func jobPod(attempt int64, status corev1.PodStatus) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: JobName("data", attempt) + "-x", Namespace: testNS,
			Labels: map[string]string{jobNameLabel: JobName("data", attempt)}},
		Status: status,
	}
}

func pullBackOff(scheduled time.Time) corev1.PodStatus {
	return corev1.PodStatus{
		Phase:      corev1.PodPending,
		Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(scheduled)}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "prepare", Image: "nope:1", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "not found"}}}},
	}
}

// status is the prepare-* annotations a controller wrote.
func status(phase, attempt string) map[string]string {
	return map[string]string{
		api.AnnotationPreparePhase:           phase,
		api.AnnotationPrepareJob:             JobName("data", 0),
		api.AnnotationPrepareObservedAttempt: attempt,
	}
}

// pvcFrom is a PVC prepared from the PVC from, with status annotations.
func pvcFrom(name, from string, st map[string]string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS,
		Annotations: merge(map[string]string{api.AnnotationPrepareFromPVC: from}, st)}}
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func TestReconcile(t *testing.T) {
	fromImage := map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36", api.AnnotationPrepareCommand: `["sh","-c"]`, api.AnnotationPrepareArgs: `["echo hi"]`}
	tests := []struct {
		name    string
		objects []client.Object
		now     time.Time
		// want: the PVC's status after one reconcile ("" phase: none written).
		wantPhase   string
		wantMessage []string
		wantJobs    []string // names of the Jobs left, sorted
		wantEvents  []string // "<type> <reason>" of the Events, in order
		wantRequeue time.Duration
	}{{
		name:    "no annotation: nothing",
		objects: []client.Object{claim(nil)},
	}, {
		name:      "prepare-from-image: Job created",
		objects:   []client.Object{claim(fromImage)},
		wantPhase: api.PhasePending, wantMessage: []string{"attempt 0: Job prepare-data-0 prepares from image busybox:1.36"},
		wantJobs: []string{"prepare-data-0"}, wantEvents: []string{"Normal PrepareStarted"},
	}, {
		name:      "Job running: Running",
		objects:   []client.Object{claim(merge(fromImage, status(api.PhasePending, "0"))), job(0, "", ""), jobPod(0, corev1.PodStatus{Phase: corev1.PodRunning})},
		wantPhase: api.PhaseRunning, wantMessage: []string{"is running"},
		wantJobs: []string{"prepare-data-0"}, wantEvents: []string{"Normal PrepareRunning"},
	}, {
		name:      "Job succeeded: Succeeded",
		objects:   []client.Object{claim(merge(fromImage, status(api.PhaseRunning, "0"))), job(0, batchv1.JobComplete, "")},
		wantPhase: api.PhaseSucceeded, wantMessage: []string{"Job prepare-data-0 succeeded"},
		wantJobs: []string{"prepare-data-0"}, wantEvents: []string{"Normal PrepareSucceeded"},
	}, {
		name: "Job failed: Failed with the reason",
		objects: []client.Object{claim(merge(fromImage, status(api.PhaseRunning, "0"))), job(0, batchv1.JobFailed, "BackoffLimitExceeded"),
			jobPod(0, corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "prepare", State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error", Message: "prepare script failed"}}}}})},
		wantPhase:   api.PhaseFailed,
		wantMessage: []string{"BackoffLimitExceeded", "container prepare exited with code 3 (Error): prepare script failed", "bump " + api.AnnotationPrepareAttempt},
		wantJobs:    []string{"prepare-data-0"}, wantEvents: []string{"Warning PrepareFailed"},
	}, {
		name:      "Failed is terminal until the attempt is bumped",
		objects:   []client.Object{claim(merge(fromImage, status(api.PhaseFailed, "0"))), job(0, batchv1.JobFailed, "BackoffLimitExceeded")},
		wantPhase: api.PhaseFailed, wantJobs: []string{"prepare-data-0"},
	}, {
		name: "attempt bump: a new Job, the failed one kept",
		objects: []client.Object{claim(merge(fromImage, status(api.PhaseFailed, "0"), map[string]string{api.AnnotationPrepareAttempt: "1"})),
			job(0, batchv1.JobFailed, "BackoffLimitExceeded")},
		wantPhase: api.PhasePending, wantMessage: []string{"attempt 1: Job prepare-data-1"},
		wantJobs: []string{"prepare-data-0", "prepare-data-1"}, wantEvents: []string{"Normal PrepareStarted"},
	}, {
		name: "attempt bump: a running earlier Job is stopped",
		objects: []client.Object{claim(merge(fromImage, status(api.PhaseRunning, "0"), map[string]string{api.AnnotationPrepareAttempt: "1"})),
			job(0, "", "")},
		wantPhase: api.PhasePending, wantMessage: []string{"attempt 1: Job prepare-data-1"},
		wantJobs: []string{"prepare-data-1"}, wantEvents: []string{"Normal PrepareSuperseded", "Normal PrepareStarted"},
	}, {
		name:      "image pull failing within the timeout: Pending, requeued for the rest",
		objects:   []client.Object{claim(merge(fromImage, status(api.PhasePending, "0"))), job(0, "", ""), jobPod(0, pullBackOff(t0))},
		now:       t0.Add(20 * time.Second),
		wantPhase: api.PhasePending, wantMessage: []string{"ImagePullBackOff: not found"},
		wantJobs: []string{"prepare-data-0"}, wantRequeue: 40 * time.Second,
	}, {
		name:      "image pull failing past the timeout: Job deleted, Failed",
		objects:   []client.Object{claim(merge(fromImage, status(api.PhasePending, "0"))), job(0, "", ""), jobPod(0, pullBackOff(t0))},
		now:       t0.Add(time.Minute),
		wantPhase: api.PhaseFailed, wantMessage: []string{"image pull failed", "ImagePullBackOff"},
		wantEvents: []string{"Warning PrepareFailed"},
	}, {
		name:      "prepare-from-pvc: waits for a missing source",
		objects:   []client.Object{claim(map[string]string{api.AnnotationPrepareFromPVC: "base"})},
		wantPhase: api.PhasePending, wantMessage: []string{"waiting for source PVC base to exist"},
		wantEvents: []string{"Normal PrepareWaiting"},
	}, {
		name: "prepare-from-pvc: copy Job once the source Succeeded",
		objects: []client.Object{claim(map[string]string{api.AnnotationPrepareFromPVC: "base"}),
			&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "base", Namespace: testNS, Annotations: merge(
				map[string]string{api.AnnotationPrepareFromImage: "busybox"}, status(api.PhaseSucceeded, "0"))}}},
		wantPhase: api.PhasePending, wantMessage: []string{"prepares from PVC base"},
		wantJobs: []string{"prepare-data-0"}, wantEvents: []string{"Normal PrepareStarted"},
	}, {
		name:      "prepare-from-pvc: itself is invalid (pvcspec)",
		objects:   []client.Object{claim(map[string]string{api.AnnotationPrepareFromPVC: "data"})},
		wantPhase: api.PhaseFailed, wantMessage: []string{"names the claim itself"},
		wantEvents: []string{"Warning PrepareInvalid"},
	}, {
		name: "prepare-from-pvc: A from B from A is a cycle",
		objects: []client.Object{claim(map[string]string{api.AnnotationPrepareFromPVC: "base"}),
			pvcFrom("base", "data", nil)},
		wantPhase: api.PhaseFailed, wantMessage: []string{"cycle: data → base → data"},
		wantEvents: []string{"Warning PrepareCycle"},
	}, {
		name: "prepare-from-pvc: a longer cycle, its other members already Failed",
		objects: []client.Object{claim(map[string]string{api.AnnotationPrepareFromPVC: "b"}),
			pvcFrom("b", "c", status(api.PhaseFailed, "0")), pvcFrom("c", "data", status(api.PhaseFailed, "0"))},
		wantPhase: api.PhaseFailed, wantMessage: []string{"cycle: data → b → c → data"},
		wantEvents: []string{"Warning PrepareCycle"},
	}, {
		name: "prepare-from-pvc: a chain into someone else's cycle waits",
		objects: []client.Object{claim(map[string]string{api.AnnotationPrepareFromPVC: "b"}),
			pvcFrom("b", "c", nil), pvcFrom("c", "b", nil)},
		wantPhase: api.PhasePending, wantMessage: []string{"waiting for source PVC b"},
		wantEvents: []string{"Normal PrepareWaiting"},
	}, {
		name: "prepare-from-pvc: a prepared PVC breaks the loop",
		objects: []client.Object{claim(map[string]string{api.AnnotationPrepareFromPVC: "base"}),
			pvcFrom("base", "data", status(api.PhaseSucceeded, "0"))},
		wantPhase: api.PhasePending, wantMessage: []string{"prepares from PVC base"},
		wantJobs: []string{"prepare-data-0"}, wantEvents: []string{"Normal PrepareStarted"},
	}, {
		name:      "invalid annotations: Failed, no Job",
		objects:   []client.Object{claim(map[string]string{api.AnnotationPrepareFromImage: "busybox", api.AnnotationPrepareArgs: `"echo"`})},
		wantPhase: api.PhaseFailed, wantMessage: []string{api.AnnotationPrepareArgs},
		wantEvents: []string{"Warning PrepareInvalid"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithObjects(tt.objects...).Build()
			rec := events.NewFakeRecorder(10)
			now := tt.now
			if now.IsZero() {
				now = t0
			}
			r := &Reconciler{Client: c, Reader: c, Recorder: rec, Clock: clocktesting.NewFakePassiveClock(now),
				Options: Options{Image: "runplane:test", Deadline: time.Hour, ImagePullTimeout: time.Minute}}
			ctx := context.Background()

			res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "data"}})
			require.NoError(t, err)
			assert.Equal(t, tt.wantRequeue, res.RequeueAfter)

			var got corev1.PersistentVolumeClaim
			require.NoError(t, c.Get(ctx, types.NamespacedName{Namespace: testNS, Name: "data"}, &got))
			st := pvcspec.StatusOf(&got)
			assert.Equal(t, tt.wantPhase, st.Phase)
			for _, want := range tt.wantMessage {
				assert.Contains(t, st.Message, want)
			}
			var jobs batchv1.JobList
			require.NoError(t, c.List(ctx, &jobs))
			var names []string
			for _, j := range jobs.Items {
				names = append(names, j.Name)
			}
			assert.Equal(t, tt.wantJobs, names)
			assert.Equal(t, tt.wantEvents, eventstest.Drain(rec))
		})
	}
}

// TestJobSpec checks the Job a from-image attempt runs: the image and its
// command, the PVC at the working directory, no retries, the deadline, owned
// by the PVC.
func TestJobSpec(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		check       func(t *testing.T, spec corev1.PodSpec)
	}{{
		name:        "from image",
		annotations: map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36", api.AnnotationPrepareCommand: `["sh","-c"]`, api.AnnotationPrepareArgs: `["echo hi"]`},
		check: func(t *testing.T, spec corev1.PodSpec) {
			c := spec.Containers[0]
			assert.Equal(t, "busybox:1.36", c.Image)
			assert.Equal(t, []string{"sh", "-c"}, c.Command)
			assert.Equal(t, []string{"echo hi"}, c.Args)
			assert.Equal(t, Workspace, c.WorkingDir)
			assert.Equal(t, []corev1.VolumeMount{{Name: "workspace", MountPath: Workspace}}, c.VolumeMounts)
			require.Len(t, spec.Volumes, 1)
			assert.Equal(t, "data", spec.Volumes[0].PersistentVolumeClaim.ClaimName)
			// Pod Security "baseline": the image decides its user.
			assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, spec.SecurityContext.SeccompProfile.Type)
			assert.Nil(t, spec.SecurityContext.RunAsNonRoot)
			assert.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
			assert.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
			assert.Equal(t, []corev1.Capability{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID"}, c.SecurityContext.Capabilities.Add)
			// Baseline's allowed additions (pod-security-admission, capabilities_baseline).
			baseline := []corev1.Capability{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
			for _, c := range c.SecurityContext.Capabilities.Add {
				assert.Contains(t, baseline, c)
			}
		},
	}, {
		name:        "from pvc",
		annotations: merge(map[string]string{api.AnnotationPrepareFromPVC: "base"}),
		check: func(t *testing.T, spec corev1.PodSpec) {
			c := spec.Containers[0]
			assert.Equal(t, "runplane:test", c.Image)
			assert.Equal(t, []string{"runplane-copy", "--from", "/source", "--to", Workspace}, c.Command)
			require.Len(t, spec.Volumes, 2)
			assert.True(t, spec.Volumes[1].PersistentVolumeClaim.ReadOnly, "source volume read-only")
			assert.Equal(t, "base", spec.Volumes[1].PersistentVolumeClaim.ClaimName)
			assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: "source", MountPath: "/source", ReadOnly: true})
			// Pod Security "restricted".
			ps := spec.SecurityContext
			assert.True(t, *ps.RunAsNonRoot)
			assert.Equal(t, int64(65532), *ps.RunAsUser)
			assert.Equal(t, int64(65532), *ps.FSGroup, "the workspace writable by the copier")
			assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, ps.SeccompProfile.Type)
			sc := c.SecurityContext
			assert.False(t, *sc.AllowPrivilegeEscalation)
			assert.True(t, *sc.ReadOnlyRootFilesystem)
			assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
			assert.Empty(t, sc.Capabilities.Add)
			assert.Nil(t, sc.Privileged)
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := pvcspec.ParseClaim(claim(tt.annotations))
			require.NoError(t, err)
			r := &Reconciler{Client: fake.NewClientBuilder().Build(), Options: Options{Image: "runplane:test", Deadline: time.Hour}}
			j := r.jobFor(claim(tt.annotations), spec, "prepare-data-0")
			assert.Equal(t, int32(0), *j.Spec.BackoffLimit)
			assert.Equal(t, int64(3600), *j.Spec.ActiveDeadlineSeconds)
			assert.Equal(t, corev1.RestartPolicyNever, j.Spec.Template.Spec.RestartPolicy)
			assert.Equal(t, api.ManagedByController, j.Labels[api.LabelManagedBy])
			// No ServiceAccount token, pinned.
			assert.Equal(t, "default", j.Spec.Template.Spec.ServiceAccountName)
			assert.False(t, *j.Spec.Template.Spec.AutomountServiceAccountToken)
			tt.check(t, j.Spec.Template.Spec)
		})
	}
}

// TestDeletedPVCDeletesItsJobs: owner references alone would deadlock with
// the PVC's protection finalizer.
func TestDeletedPVCDeletesItsJobs(t *testing.T) {
	pvc := claim(map[string]string{api.AnnotationPrepareFromImage: "busybox"})
	pvc.Finalizers = []string{"kubernetes.io/pvc-protection"}
	pvc.DeletionTimestamp = ptr.To(metav1.NewTime(t0))
	c := fake.NewClientBuilder().WithObjects(pvc, job(0, batchv1.JobComplete, ""), job(1, "", "")).Build()
	r := &Reconciler{Client: c, Reader: c, Recorder: events.NewFakeRecorder(10), Clock: clocktesting.NewFakePassiveClock(t0)}
	_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "data"}})
	require.NoError(t, err)
	for _, n := range []int64{0, 1} {
		err := c.Get(context.Background(), types.NamespacedName{Namespace: testNS, Name: JobName("data", n)}, &batchv1.Job{})
		assert.True(t, apierrors.IsNotFound(err), "Job of attempt %d: %v", n, err)
	}
}
