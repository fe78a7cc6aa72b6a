package pvcspec_test

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/pvcspec"
)

// Parse reads what a claim asks for; admission and the storage controller
// both call it.
func ExampleParse() {
	spec, err := pvcspec.Parse("data", map[string]string{
		api.AnnotationPrepareFromImage: "busybox:1.36",
		api.AnnotationPrepareCommand:   `["sh","-c"]`,
		api.AnnotationPrepareArgs:      `["echo hi > /workspace/hello"]`,
		api.AnnotationPrepareAttempt:   "2",
	})
	fmt.Printf("%s %q %q attempt %d, err %v\n", spec.FromImage, spec.Command, spec.Args, spec.Attempt, err)
	// Output: busybox:1.36 ["sh" "-c"] ["echo hi > /workspace/hello"] attempt 2, err <nil>
}

// A bad annotation is reported by key, as an *InvalidError.
func ExampleParse_invalid() {
	_, err := pvcspec.Parse("data", map[string]string{api.AnnotationPrepareFromImage: "busybox", api.AnnotationPrepareAttempt: "-1"})
	var invalid *pvcspec.InvalidError
	fmt.Println(errors.As(err, &invalid), invalid.Key)
	// Output: true runplane.io/prepare-attempt
}

// Ready is the storage gate's rule: a claim that asks for preparation is
// ready once the attempt it asks for has Succeeded.
func ExampleReady() {
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Annotations: map[string]string{
		api.AnnotationPrepareFromImage: "busybox:1.36",
	}}}
	fmt.Println(pvcspec.Ready(claim), pvcspec.NeedsPreparation(claim))

	claim.Annotations[api.AnnotationPreparePhase] = api.PhaseSucceeded
	claim.Annotations[api.AnnotationPrepareObservedAttempt] = "0"
	fmt.Println(pvcspec.Ready(claim), pvcspec.NeedsPreparation(claim))

	// Bumping the attempt asks for a new preparation.
	claim.Annotations[api.AnnotationPrepareAttempt] = "1"
	fmt.Println(pvcspec.Ready(claim), pvcspec.StatusOf(claim).ObservedAttempt)
	// Output:
	// false true
	// true false
	// false 0
}
