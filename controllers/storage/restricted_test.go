package storage

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/pvcspec"
)

// Prepare and copy Jobs are admitted where Pod Security "restricted" is
// enforced (the API server's own checks) and carry requests and limits for
// a compute ResourceQuota; elsewhere a prepare image keeps its own user.
func TestJobsInRestrictedNamespaces(t *testing.T) {
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	require.NoError(t, err)
	restricted := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}
	ns := func(name, level string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{podSecurityEnforceLabel: level}}}
	}
	c := fake.NewClientBuilder().WithObjects(ns("strict", "restricted"), ns("open", "baseline")).Build()
	r := &Reconciler{Client: c, Reader: c, Options: Options{Image: "runplane:test"}}
	tests := []struct {
		name, ns       string
		annotations    map[string]string
		wantRestricted bool
	}{
		{"image, restricted namespace", "strict", map[string]string{api.AnnotationPrepareFromImage: "busybox"}, true},
		{"image, baseline namespace", "open", map[string]string{api.AnnotationPrepareFromImage: "busybox"}, false},
		{"copy, baseline namespace", "open", map[string]string{api.AnnotationPrepareFromPVC: "base"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pvc := claim(tt.annotations)
			pvc.Namespace = tt.ns
			spec, err := pvcspec.ParseClaim(pvc)
			require.NoError(t, err)
			job := r.jobFor(pvc, spec, "prepare-data-0")
			if spec.FromImage != "" {
				strict, err := r.enforcesRestricted(context.Background(), tt.ns)
				require.NoError(t, err)
				if strict {
					restrictImageJob(job)
				}
			}
			pod := job.Spec.Template
			allowed := true
			for _, res := range eval.EvaluatePod(restricted, &pod.ObjectMeta, &pod.Spec) {
				allowed = allowed && res.Allowed
			}
			assert.Equal(t, tt.wantRestricted, allowed)
			for _, ctr := range pod.Spec.Containers {
				assert.NotEmpty(t, ctr.Resources.Requests, ctr.Name)
				assert.NotEmpty(t, ctr.Resources.Limits, ctr.Name)
			}
		})
	}
}
