package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/controllers"
	"github.com/runplane/runplane/controllers/accessor"
	"github.com/runplane/runplane/controllers/egress"
	"github.com/runplane/runplane/pvcspec"
	"github.com/runplane/runplane/test/cluster"
)

var env *cluster.Cluster

func TestMain(m *testing.M) {
	cluster.Main(m, cluster.Options{Nodes: []cluster.Node{{Name: "node-a"}, {Name: "node-b"}}}, func(c *cluster.Cluster) { env = c })
}

const (
	testImage     = "runplane:test"
	natsSource    = "nats-source"
	jobNameLabel  = "batch.kubernetes.io/job-name"
	chaosLabel    = "pod-container-running-failed.stage.kwok.x-k8s.io"
	chaosExitCode = "pod-container-running-failed.stage.kwok.x-k8s.io/exit-code"
	chaosReason   = "pod-container-running-failed.stage.kwok.x-k8s.io/reason"
	chaosMessage  = "pod-container-running-failed.stage.kwok.x-k8s.io/message"
)

var natsLabels = map[string]string{"app.kubernetes.io/name": "nats"}

// startManager runs the controllers in-process until the test ends (or stop
// is called).
func startManager(t *testing.T) (stop func()) {
	t.Helper()
	cfg := controllers.Config{
		RESTConfig:            env.RESTConfig(),
		Namespace:             api.DefaultNamespace,
		Image:                 testImage,
		ImagePullTimeout:      time.Minute,
		NATS:                  egress.NATSEndpoint{Namespace: api.DefaultNamespace, PodLabels: natsLabels, Port: 4222},
		NATSCredentialsSource: natsSource,
		MetricsAddr:           "0",
		ProbeAddr:             "0",
		SkipNameValidation:    true,
	}
	mgr, err := controllers.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func client() kubernetes.Interface { return env.Client() }

func namespace(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.TrimRight(name, "-")
	_, err := client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return name
}

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	_, err := client().CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func pvc(ns, name string, annotations map[string]string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
}

func createPVC(t *testing.T, p *corev1.PersistentVolumeClaim) {
	t.Helper()
	if _, err := client().CoreV1().PersistentVolumeClaims(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func getPVC(t *testing.T, ns, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	p, err := client().CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func annotatePVC(t *testing.T, ns, name, key string, value *string) {
	t.Helper()
	v := "null"
	if value != nil {
		v = fmt.Sprintf("%q", *value)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, key, v)
	if _, err := client().CoreV1().PersistentVolumeClaims(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		if err != nil {
			last = err
			return false, nil
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("timed out waiting for %s (last error: %v)", what, last)
	}
}

func waitPhase(t *testing.T, ns, name, phase, attempt string) *corev1.PersistentVolumeClaim {
	t.Helper()
	var got *corev1.PersistentVolumeClaim
	eventually(t, 60*time.Second, fmt.Sprintf("PVC %s phase %s attempt %s", name, phase, attempt), func() (bool, error) {
		p, err := client().CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = p
		st := pvcspec.StatusOf(p)
		return st.Phase == phase && st.ObservedAttempt == attempt, nil
	})
	return got
}

func jobsOf(t *testing.T, ns string, p *corev1.PersistentVolumeClaim) []batchv1.Job {
	t.Helper()
	jobs, err := client().BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []batchv1.Job
	for _, j := range jobs.Items {
		if ref := metav1.GetControllerOf(&j); ref != nil && ref.UID == p.UID {
			out = append(out, j)
		}
	}
	return out
}

func hasEvent(t *testing.T, ns, object, reason, contains string) bool {
	t.Helper()
	evs, err := client().CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == object && e.Reason == reason && strings.Contains(e.Message, contains) {
			return true
		}
	}
	return false
}

// failJobPods makes the Pods of a Job fail with exit code 3, through kwok's
// chaos stage (test/cluster loads pod/chaos/pod-container-running-failed):
// the label, put on as soon as the Pod exists, makes kwok fail its container
// instead of completing it.
func failJobPods(t *testing.T, ns, job string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		labelled := map[string]bool{}
		for ctx.Err() == nil {
			pods, err := client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: jobNameLabel + "=" + job})
			if err == nil {
				for _, p := range pods.Items {
					if labelled[p.Name] {
						continue
					}
					patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"},"annotations":{%q:"3",%q:"Error",%q:"prepare script failed"}}}`,
						chaosLabel, chaosExitCode, chaosReason, chaosMessage)
					if _, err := client().CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
						labelled[p.Name] = true
					}
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
}

func TestPrepareFromImage(t *testing.T) {
	startManager(t)
	ns := namespace(t)
	createPVC(t, pvc(ns, "data", map[string]string{
		api.AnnotationPrepareFromImage: "busybox:1.36",
		api.AnnotationPrepareCommand:   `["sh","-c"]`,
		api.AnnotationPrepareArgs:      `["echo hi > /workspace/hello"]`,
	}))
	p := waitPhase(t, ns, "data", api.PhaseSucceeded, "0")
	if got := p.Annotations[api.AnnotationPrepareJob]; got != "prepare-data-0" {
		t.Errorf("prepare-job = %q, want prepare-data-0", got)
	}
	jobs := jobsOf(t, ns, p)
	if len(jobs) != 1 {
		t.Fatalf("%d Jobs, want 1", len(jobs))
	}
	j := jobs[0]
	c := j.Spec.Template.Spec.Containers[0]
	if *j.Spec.BackoffLimit != 0 || c.Image != "busybox:1.36" || !slices.Equal(c.Command, []string{"sh", "-c"}) ||
		!slices.Equal(c.Args, []string{"echo hi > /workspace/hello"}) || c.VolumeMounts[0].MountPath != "/workspace" ||
		j.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "data" {
		t.Errorf("unexpected Job spec: backoffLimit %d, container %+v, volumes %+v", *j.Spec.BackoffLimit, c, j.Spec.Template.Spec.Volumes)
	}
	eventually(t, 10*time.Second, "PrepareSucceeded event", func() (bool, error) {
		return hasEvent(t, ns, "data", "PrepareSucceeded", "succeeded"), nil
	})

	// Deleting the PVC removes its Jobs through the owner reference.
	if err := client().CoreV1().PersistentVolumeClaims(ns).Delete(context.Background(), "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the Job to be garbage collected", func() (bool, error) {
		_, err := client().BatchV1().Jobs(ns).Get(context.Background(), j.Name, metav1.GetOptions{})
		if err == nil {
			p, perr := client().CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), "data", metav1.GetOptions{})
			if perr == nil {
				return false, fmt.Errorf("PVC still there: deleting %v, finalizers %v", p.DeletionTimestamp, p.Finalizers)
			}
			return false, fmt.Errorf("PVC: %v; Job still there", perr)
		}
		return apierrors.IsNotFound(err), nil
	})
}

func TestPrepareFailsThenRecovers(t *testing.T) {
	startManager(t)
	ns := namespace(t)
	failJobPods(t, ns, "prepare-data-0")
	createPVC(t, pvc(ns, "data", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}))
	p := waitPhase(t, ns, "data", api.PhaseFailed, "0")
	msg := p.Annotations[api.AnnotationPrepareMessage]
	for _, want := range []string{"BackoffLimitExceeded", "exited with code 3", "prepare script failed", api.AnnotationPrepareAttempt} {
		if !strings.Contains(msg, want) {
			t.Errorf("prepare-message %q does not contain %q", msg, want)
		}
	}
	eventually(t, 10*time.Second, "PrepareFailed event", func() (bool, error) {
		return hasEvent(t, ns, "data", "PrepareFailed", "exited with code 3"), nil
	})
	// Failed is terminal: no retry until the attempt is bumped.
	time.Sleep(2 * time.Second)
	if n := len(jobsOf(t, ns, p)); n != 1 {
		t.Fatalf("%d Jobs after a failure, want 1", n)
	}

	annotatePVC(t, ns, "data", api.AnnotationPrepareAttempt, ptr.To("1"))
	p = waitPhase(t, ns, "data", api.PhaseSucceeded, "1")
	if got := p.Annotations[api.AnnotationPrepareJob]; got != "prepare-data-1" {
		t.Errorf("prepare-job = %q, want prepare-data-1", got)
	}
	if n := len(jobsOf(t, ns, p)); n != 2 {
		t.Errorf("%d Jobs after one recovery, want 2 (one per attempt)", n)
	}
}

func TestPrepareFromPVCWaitsForSource(t *testing.T) {
	startManager(t)
	ns := namespace(t)
	createPVC(t, pvc(ns, "copy", map[string]string{api.AnnotationPrepareFromPVC: "base"}))
	p := waitPhase(t, ns, "copy", api.PhasePending, "0")
	if msg := p.Annotations[api.AnnotationPrepareMessage]; !strings.Contains(msg, "waiting for source PVC base") {
		t.Errorf("message %q does not say it waits for the source", msg)
	}
	createPVC(t, pvc(ns, "base", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}))
	// Until the source has Succeeded, the copy has no Job.
	for {
		src := getPVC(t, ns, "base")
		if n := len(jobsOf(t, ns, getPVC(t, ns, "copy"))); n != 0 {
			if !pvcspec.Ready(src) {
				t.Fatalf("copy Job created while the source is %q", pvcspec.StatusOf(src).Phase)
			}
			break
		}
		if pvcspec.Ready(src) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	p = waitPhase(t, ns, "copy", api.PhaseSucceeded, "0")
	jobs := jobsOf(t, ns, p)
	if len(jobs) != 1 {
		t.Fatalf("%d copy Jobs, want 1", len(jobs))
	}
	spec := jobs[0].Spec.Template.Spec
	c := spec.Containers[0]
	if c.Image != testImage || !slices.Equal(c.Command, []string{"runplane-copy", "--from", "/source", "--to", "/workspace"}) {
		t.Errorf("copy container %+v", c)
	}
	var src *corev1.Volume
	for i := range spec.Volumes {
		if v := spec.Volumes[i].PersistentVolumeClaim; v != nil && v.ClaimName == "base" {
			src = &spec.Volumes[i]
		}
	}
	if src == nil || !src.PersistentVolumeClaim.ReadOnly || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == src.Name && m.ReadOnly }) {
		t.Errorf("source not mounted read-only: volumes %+v mounts %+v", spec.Volumes, c.VolumeMounts)
	}
}

func gatedPod(ns, name, claim string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			SchedulingGates: []corev1.PodSchedulingGate{{Name: api.SchedulingGateStorage}},
			Containers:      []corev1.Container{{Name: "main", Image: "busybox:1.36"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		},
	}
}

func TestGateReleasedAfterPreparation(t *testing.T) {
	startManager(t)
	ns := namespace(t)
	ctx := context.Background()
	createPVC(t, pvc(ns, "data", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}))
	if _, err := client().CoreV1().Pods(ns).Create(ctx, gatedPod(ns, "worker", "data"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// While the PVC is not prepared, the Pod keeps its gate and no node.
	for !pvcspec.Ready(getPVC(t, ns, "data")) {
		pod, err := client().CoreV1().Pods(ns).Get(ctx, "worker", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(pod.Spec.SchedulingGates) == 0 || pod.Spec.NodeName != "" {
			if pvcspec.Ready(getPVC(t, ns, "data")) {
				break // released right after Succeeded: fine
			}
			t.Fatalf("Pod released before its PVC was prepared: gates %v node %q", pod.Spec.SchedulingGates, pod.Spec.NodeName)
		}
		time.Sleep(100 * time.Millisecond)
	}
	eventually(t, 30*time.Second, "the Pod to be ungated and scheduled", func() (bool, error) {
		pod, err := client().CoreV1().Pods(ns).Get(ctx, "worker", metav1.GetOptions{})
		return err == nil && len(pod.Spec.SchedulingGates) == 0 && pod.Spec.NodeName != "", err
	})
}

func TestGateEventOnFailure(t *testing.T) {
	startManager(t)
	ns := namespace(t)
	failJobPods(t, ns, "prepare-data-0")
	createPVC(t, pvc(ns, "data", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}))
	if _, err := client().CoreV1().Pods(ns).Create(context.Background(), gatedPod(ns, "worker", "data"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "data", api.PhaseFailed, "0")
	eventually(t, 20*time.Second, "StoragePrepareFailed event on the Pod", func() (bool, error) {
		return hasEvent(t, ns, "worker", "StoragePrepareFailed", "data"), nil
	})
	pod, err := client().CoreV1().Pods(ns).Get(context.Background(), "worker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.SchedulingGates) != 1 {
		t.Errorf("a Pod whose PVC failed lost its gate: %v", pod.Spec.SchedulingGates)
	}
}

func TestAccessorAppearsAndGoes(t *testing.T) {
	startManager(t)
	ns := namespace(t)
	ctx := context.Background()
	createPVC(t, pvc(ns, "data", nil))
	// A Pod already mounts the ReadWriteOnce volume on node-b.
	user := gatedPod(ns, "user", "data")
	user.Spec.SchedulingGates = nil
	user.Spec.NodeName = "node-b"
	if _, err := client().CoreV1().Pods(ns).Create(ctx, user, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	annotatePVC(t, ns, "data", api.AnnotationAccessor, ptr.To(api.AccessorEnabled))
	name := accessor.Name("data")
	var dep *appsv1.Deployment
	eventually(t, 30*time.Second, "accessor Deployment and Service", func() (bool, error) {
		d, err := client().AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		dep = d
		_, err = client().CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil, err
	})
	spec := dep.Spec.Template.Spec
	c := spec.Containers[0]
	if c.Image != testImage || c.Command[0] != "runplane-accessor" || !c.VolumeMounts[0].ReadOnly || !spec.Volumes[0].PersistentVolumeClaim.ReadOnly {
		t.Errorf("accessor container %+v volumes %+v", c, spec.Volumes)
	}
	terms := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || terms[0].MatchFields[0].Values[0] != "node-b" {
		t.Errorf("accessor not pinned to node-b: %+v", terms)
	}
	eventually(t, 60*time.Second, "accessor Ready with its URL", func() (bool, error) {
		p := getPVC(t, ns, "data")
		return p.Annotations[api.AnnotationAccessorPhase] == api.AccessorReady &&
			p.Annotations[api.AnnotationAccessorURL] == fmt.Sprintf("http://%s.%s.svc.cluster.local/", name, ns), nil
	})

	annotatePVC(t, ns, "data", api.AnnotationAccessor, nil)
	eventually(t, 30*time.Second, "accessor objects and annotations removed", func() (bool, error) {
		_, derr := client().AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		_, serr := client().CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		p := getPVC(t, ns, "data")
		_, hasURL := p.Annotations[api.AnnotationAccessorURL]
		_, hasPhase := p.Annotations[api.AnnotationAccessorPhase]
		return apierrors.IsNotFound(derr) && apierrors.IsNotFound(serr) && !hasURL && !hasPhase, nil
	})
}

func TestEgressPolicyAndNATSSecret(t *testing.T) {
	startManager(t)
	ensureNamespace(t, api.DefaultNamespace)
	ns := namespace(t)
	ctx := context.Background()
	src := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: natsSource, Namespace: api.DefaultNamespace}, Data: map[string][]byte{"token": []byte("t0")}}
	if _, err := client().CoreV1().Secrets(api.DefaultNamespace).Create(ctx, src, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	worker := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "worker", Namespace: ns, Labels: map[string]string{api.LabelPool: "echo", api.LabelEgress: api.EgressRestricted}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox:1.36"}}},
	}
	if _, err := client().CoreV1().Pods(ns).Create(ctx, worker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var np *networkingv1.NetworkPolicy
	eventually(t, 30*time.Second, "egress NetworkPolicy", func() (bool, error) {
		var err error
		np, err = client().NetworkingV1().NetworkPolicies(ns).Get(ctx, egress.PolicyName, metav1.GetOptions{})
		return err == nil, err
	})
	checkPolicy(t, np)

	eventually(t, 30*time.Second, "NATS credentials copied", func() (bool, error) {
		s, err := client().CoreV1().Secrets(ns).Get(ctx, api.NATSCredentialsSecret, metav1.GetOptions{})
		return err == nil && string(s.Data["token"]) == "t0", err
	})
	src.Data["token"] = []byte("t1")
	if _, err := client().CoreV1().Secrets(api.DefaultNamespace).Update(ctx, src, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "NATS credentials follow the source", func() (bool, error) {
		s, err := client().CoreV1().Secrets(ns).Get(ctx, api.NATSCredentialsSecret, metav1.GetOptions{})
		return err == nil && string(s.Data["token"]) == "t1", err
	})

	if err := client().CoreV1().Pods(ns).Delete(ctx, "worker", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "policy and secret removed with the last Pod", func() (bool, error) {
		_, perr := client().NetworkingV1().NetworkPolicies(ns).Get(ctx, egress.PolicyName, metav1.GetOptions{})
		_, serr := client().CoreV1().Secrets(ns).Get(ctx, api.NATSCredentialsSecret, metav1.GetOptions{})
		return apierrors.IsNotFound(perr) && apierrors.IsNotFound(serr), nil
	})
}

func checkPolicy(t *testing.T, np *networkingv1.NetworkPolicy) {
	t.Helper()
	if np.Spec.PodSelector.MatchLabels[api.LabelEgress] != api.EgressRestricted || !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) {
		t.Errorf("selector/policy types: %+v %v", np.Spec.PodSelector, np.Spec.PolicyTypes)
	}
	var dns, public, nats bool
	for _, r := range np.Spec.Egress {
		switch {
		case len(r.To) == 0:
			for _, p := range r.Ports {
				dns = dns || p.Port.IntVal == 53
			}
		case r.To[0].IPBlock != nil:
			for _, peer := range r.To {
				if peer.IPBlock.CIDR == "0.0.0.0/0" {
					for _, cidr := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16"} {
						if !slices.Contains(peer.IPBlock.Except, cidr) {
							t.Errorf("private range %s not denied: %v", cidr, peer.IPBlock.Except)
						}
					}
					public = true
				}
			}
		case r.To[0].PodSelector != nil:
			nats = r.To[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] == api.DefaultNamespace &&
				r.To[0].PodSelector.MatchLabels["app.kubernetes.io/name"] == "nats" && r.Ports[0].Port.IntVal == 4222
		}
	}
	if !dns || !public || !nats {
		t.Errorf("policy rules dns=%t public=%t nats=%t: %+v", dns, public, nats, np.Spec.Egress)
	}
}

func TestRestartedControllerMakesNoDuplicate(t *testing.T) {
	stop := startManager(t)
	ns := namespace(t)
	ctx := context.Background()
	// The attempt may still run, or have finished, across the restart.
	createPVC(t, pvc(ns, "data", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}))
	eventually(t, 30*time.Second, "the prepare Job", func() (bool, error) {
		return len(jobsOf(t, ns, getPVC(t, ns, "data"))) == 1, nil
	})
	stop()
	// Lose the status as a crash between creating the Job and recording it
	// would, then run a fresh controller.
	for _, k := range []string{api.AnnotationPreparePhase, api.AnnotationPrepareJob, api.AnnotationPrepareMessage, api.AnnotationPrepareObservedAttempt} {
		annotatePVC(t, ns, "data", k, nil)
	}
	startManager(t)
	p := waitPhase(t, ns, "data", api.PhaseSucceeded, "0")
	if n := len(jobsOf(t, ns, p)); n != 1 {
		t.Fatalf("%d Jobs after a restart, want 1", n)
	}
	if _, err := client().BatchV1().Jobs(ns).Get(ctx, "prepare-data-0", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestInvalidAnnotationsReported(t *testing.T) {
	startManager(t)
	ns := namespace(t)
	tests := []struct {
		name        string
		annotations map[string]string
		want        string
	}{
		{"bad-args", map[string]string{api.AnnotationPrepareFromImage: "busybox", api.AnnotationPrepareArgs: `"echo"`}, api.AnnotationPrepareArgs},
		{"bad-attempt", map[string]string{api.AnnotationPrepareFromImage: "busybox", api.AnnotationPrepareAttempt: "-1"}, api.AnnotationPrepareAttempt},
		{"both", map[string]string{api.AnnotationPrepareFromImage: "busybox", api.AnnotationPrepareFromPVC: "x"}, "cannot be combined with " + api.AnnotationPrepareFromPVC},
	}
	for _, tt := range tests {
		createPVC(t, pvc(ns, tt.name, tt.annotations))
	}
	for _, tt := range tests {
		eventually(t, 30*time.Second, tt.name+" Failed", func() (bool, error) {
			p := getPVC(t, ns, tt.name)
			return p.Annotations[api.AnnotationPreparePhase] == api.PhaseFailed, nil
		})
		p := getPVC(t, ns, tt.name)
		if msg := p.Annotations[api.AnnotationPrepareMessage]; !strings.Contains(msg, tt.want) {
			t.Errorf("%s: message %q does not name %q", tt.name, msg, tt.want)
		}
		if n := len(jobsOf(t, ns, p)); n != 0 {
			t.Errorf("%s: %d Jobs for invalid annotations", tt.name, n)
		}
	}
}
