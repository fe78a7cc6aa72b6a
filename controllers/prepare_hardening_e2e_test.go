package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
)

// TestPrepareFromPVCCycle: A from B and B from A both end Failed with a
// message naming the cycle and a Warning Event (on BASE both stayed
// Pending, "waiting for source", forever).
func TestPrepareFromPVCCycle(t *testing.T) {
	startManager(t)
	ns := env.Namespace(t, "")
	createPVC(t, pvc(ns, "a", map[string]string{api.AnnotationPrepareFromPVC: "b"}))
	waitPhase(t, ns, "a", api.PhasePending, "0")
	createPVC(t, pvc(ns, "b", map[string]string{api.AnnotationPrepareFromPVC: "a"}))
	for _, name := range []string{"a", "b"} {
		p := waitPhase(t, ns, name, api.PhaseFailed, "0")
		assert.Contains(t, p.Annotations[api.AnnotationPrepareMessage], api.AnnotationPrepareFromPVC+" cycle: ")
		other := map[string]string{"a": "b", "b": "a"}[name]
		assert.Contains(t, p.Annotations[api.AnnotationPrepareMessage], name+" → "+other+" → "+name)
		waitEvent(t, 10*time.Second, ns, name, "PrepareCycle", "cycle")
		assert.Empty(t, jobsOf(t, ns, p), "no copy Job for a PVC in a cycle")
	}
}

// podSecurityNamespace creates a namespace that enforces a Pod Security level.
func podSecurityNamespace(t *testing.T, base, suffix, level string) string {
	t.Helper()
	name := base + "-" + suffix
	_, err := client().CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: map[string]string{"pod-security.kubernetes.io/enforce": level}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return name
}

// TestPrepareJobsPodSecurity: the copy Job's Pod is admitted where Pod
// Security "restricted" is enforced, the prepare-from-image Job's where
// "baseline" is (and, honestly, not where restricted is: the image picks
// its user). On BASE the copy Job's Pod was refused by restricted (no
// seccomp profile, runAsNonRoot, capabilities drop), so the PVC never
// prepared.
func TestPrepareJobsPodSecurity(t *testing.T) {
	startManager(t)
	ctx := context.Background()

	base := env.Namespace(t, "")
	restricted := podSecurityNamespace(t, base, "r", "restricted")
	createPVC(t, pvc(restricted, "base", nil))
	createPVC(t, pvc(restricted, "copy", map[string]string{api.AnnotationPrepareFromPVC: "base"}))
	p := waitPhase(t, restricted, "copy", api.PhaseSucceeded, "0")
	jobs := jobsOf(t, restricted, p)
	require.Len(t, jobs, 1)
	pods, err := client().CoreV1().Pods(restricted).List(ctx, metav1.ListOptions{LabelSelector: jobNameLabel + "=" + jobs[0].Name})
	require.NoError(t, err)
	require.NotEmpty(t, pods.Items, "the copy Job's Pod was admitted under restricted")
	spec := pods.Items[0].Spec
	assert.False(t, *spec.AutomountServiceAccountToken)
	for _, v := range spec.Volumes {
		assert.Nil(t, v.Projected, "no ServiceAccount token volume")
	}

	baseline := podSecurityNamespace(t, base, "b", "baseline")
	createPVC(t, pvc(baseline, "data", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}))
	p = waitPhase(t, baseline, "data", api.PhaseSucceeded, "0")
	jobs = jobsOf(t, baseline, p)
	require.Len(t, jobs, 1)

	// The image Job's Pod, tried (dry run) where restricted is enforced.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "image-job-probe", Namespace: restricted}, Spec: jobs[0].Spec.Template.Spec}
	_, err = client().CoreV1().Pods(restricted).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	require.True(t, apierrors.IsForbidden(err), "restricted refuses the image Job (it may run as root): %v", err)
	assert.True(t, strings.Contains(err.Error(), "runAsNonRoot") || strings.Contains(err.Error(), "capabilities"), "%v", err)
}
