package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/hack/images"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/kit"
)

// prepareScript is what the prepare-from-image Job runs in the user image:
// a file in a subdirectory, and one with a mode of its own.
const prepareScript = `mkdir -p weights && echo "real-weights" > weights/w.bin && echo "hello from the image" > README && chmod 0604 README && echo prepared`

// fromImage is a PVC the user image prepares with prepareScript.
func fromImage(t *testing.T, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	cmd, err := json.Marshal([]string{"sh", "-c", prepareScript})
	require.NoError(t, err)
	return kit.Claim(name, "16Mi", map[string]string{api.AnnotationPrepareFromImage: images.UserRef, api.AnnotationPrepareCommand: string(cmd)})
}

// waitPrepared waits until the PVC's preparation Succeeded and returns it;
// a Failed one ends the test with the controller's message.
func waitPrepared(t *testing.T, ctx context.Context, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	var pvc *corev1.PersistentVolumeClaim
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		if pvc, err = env.Client().CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, err
		}
		switch pvc.Annotations[api.AnnotationPreparePhase] {
		case api.PhaseSucceeded:
			return true, nil
		case api.PhaseFailed:
			return false, fmt.Errorf("PVC %s: preparation failed: %s", name, pvc.Annotations[api.AnnotationPrepareMessage])
		}
		return false, nil
	})
	phase := ""
	if pvc != nil {
		phase = pvc.Annotations[api.AnnotationPreparePhase] + ": " + pvc.Annotations[api.AnnotationPrepareMessage]
	}
	require.NoError(t, err, "PVC %s never prepared (%s)", name, phase)
	return pvc
}

// jobPod returns the (finished) Pod of a prepare Job.
func jobPod(t *testing.T, ctx context.Context, job string) corev1.Pod {
	t.Helper()
	pods, err := env.Client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1, "Pods of Job %s", job)
	return pods.Items[0]
}

// A PVC prepared from an image and a second one copied from it by the
// copier (runplane-copy from the runplane image) are written by real Jobs
// on the real node; a Pod mounting the copy is gated by the webhook and
// starts, once the copy Succeeded, with the image's files in it.
func TestPrepareFromImageAndPVCOnRealNode(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := env.Client().CoreV1()

	// The reader first: its claim does not exist yet, so it is gated.
	reader := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: images.UserRef, ImagePullPolicy: corev1.PullNever,
				Command:      []string{"sh", "-c", `echo "weights: $(cat /data/weights/w.bin)"; echo "readme: $(stat -c %a /data/README) $(cat /data/README)"; echo done; exec sleep 3600`},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "copy"}}}},
			NodeSelector:                  map[string]string{cluster.RealNodeLabel: "true"},
			Tolerations:                   []corev1.Toleration{cluster.RealNodeToleration},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
	created, err := c.Pods(ns).Create(ctx, reader, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Pods(ns).Delete(context.Background(), "reader", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	require.True(t, slices.ContainsFunc(created.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == api.SchedulingGateStorage }),
		"the webhook did not gate a Pod whose PVC is not prepared: %v", created.Spec.SchedulingGates)

	_, err = c.PersistentVolumeClaims(ns).Create(ctx, fromImage(t, "model"), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.PersistentVolumeClaims(ns).Create(ctx, kit.Claim("copy", "16Mi", map[string]string{api.AnnotationPrepareFromPVC: "model"}), metav1.CreateOptions{})
	require.NoError(t, err)

	model := waitPrepared(t, ctx, "model")
	prep := jobPod(t, ctx, model.Annotations[api.AnnotationPrepareJob])
	require.Equal(t, node.Name, prep.Spec.NodeName)
	require.Equal(t, images.UserRef, prep.Spec.Containers[0].Image)
	require.Equal(t, corev1.PodSucceeded, prep.Status.Phase)

	cp := waitPrepared(t, ctx, "copy")
	copyPod := jobPod(t, ctx, cp.Annotations[api.AnnotationPrepareJob])
	require.Equal(t, node.Name, copyPod.Spec.NodeName)
	require.Equal(t, images.RunplaneRef, copyPod.Spec.Containers[0].Image)
	require.Equal(t, "runplane-copy", copyPod.Spec.Containers[0].Command[0])
	require.Equal(t, corev1.PodSucceeded, copyPod.Status.Phase)

	// The reader runs once released, and sees what the image wrote, through
	// the copy (mode kept).
	log := logsWhen(t, ctx, ns, "reader", "done")
	require.Contains(t, log, "weights: real-weights\n")
	require.Contains(t, log, "readme: 604 hello from the image\n")
	got, err := c.Pods(ns).Get(ctx, "reader", metav1.GetOptions{})
	require.NoError(t, err)
	require.Empty(t, got.Spec.SchedulingGates)
	require.Equal(t, node.Name, got.Spec.NodeName)
}
