package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	jobNameLabel  = "batch.kubernetes.io/job-name"
	chaosLabel    = "pod-container-running-failed.stage.kwok.x-k8s.io"
	chaosExitCode = "pod-container-running-failed.stage.kwok.x-k8s.io/exit-code"
	chaosReason   = "pod-container-running-failed.stage.kwok.x-k8s.io/reason"
	chaosMessage  = "pod-container-running-failed.stage.kwok.x-k8s.io/message"
)

var natsLabels = map[string]string{"app.kubernetes.io/name": "nats"}

// egressSettings are the chart's defaults in networkPolicy mode, the mode in
// which the controller keeps policies.
func egressSettings() egress.Settings {
	s := egress.DefaultSettings()
	s.Enforcement = egress.EnforcementNetworkPolicy
	s.NATS = egress.NATSEndpoint{Namespace: api.DefaultNamespace, PodLabels: natsLabels, Port: 4222}
	return s
}

// startManager runs the controllers in-process until the test ends (or stop
// is called).
func startManager(t *testing.T, modify ...func(*controllers.Config)) (stop func()) {
	t.Helper()
	cfg := controllers.Config{RESTConfig: env.RESTConfig(), SkipNameValidation: true}
	cfg.Namespace, cfg.Image, cfg.ImagePullTimeout.Duration, cfg.Egress = api.DefaultNamespace, testImage, time.Minute, egressSettings()
	cfg.Metrics.BindAddress, cfg.HealthAddr = "0", "0"
	cfg.LeaderElection.LeaderElect = ptr.To(false) // one in-process instance
	for _, m := range modify {
		m(&cfg)
	}
	mgr, err := controllers.NewManager(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			assert.NoError(t, <-done, "manager")
		})
	}
	t.Cleanup(stop)
	return stop
}

func client() kubernetes.Interface { return env.Client() }

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	_, err := client().CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
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
	_, err := client().CoreV1().PersistentVolumeClaims(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	require.NoError(t, err)
}

func getPVC(t *testing.T, ns, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	p, err := client().CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return p
}

func annotatePVC(t *testing.T, ns, name, key string, value *string) {
	t.Helper()
	v := "null"
	if value != nil {
		v = fmt.Sprintf("%q", *value)
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, key, v)
	_, err := client().CoreV1().PersistentVolumeClaims(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

// tick is the interval of every poll in this file.
const tick = 200 * time.Millisecond

func waitPhase(t *testing.T, ns, name, phase, attempt string) *corev1.PersistentVolumeClaim {
	t.Helper()
	var got *corev1.PersistentVolumeClaim
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p, err := client().CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(c, err)
		got = p
		st := pvcspec.StatusOf(p)
		assert.Equal(c, phase, st.Phase)
		assert.Equal(c, attempt, st.ObservedAttempt)
	}, 60*time.Second, tick, "PVC %s phase %s attempt %s", name, phase, attempt)
	return got
}

func jobsOf(t *testing.T, ns string, p *corev1.PersistentVolumeClaim) []batchv1.Job {
	t.Helper()
	jobs, err := client().BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var out []batchv1.Job
	for _, j := range jobs.Items {
		if ref := metav1.GetControllerOf(&j); ref != nil && ref.UID == p.UID {
			out = append(out, j)
		}
	}
	return out
}

// waitEvent waits for an Event about object with this reason whose message
// contains the text.
func waitEvent(t *testing.T, timeout time.Duration, ns, object, reason, contains string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs, err := client().CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		require.NoError(c, err)
		assert.True(c, slices.ContainsFunc(evs.Items, func(e corev1.Event) bool {
			return e.InvolvedObject.Name == object && e.Reason == reason && strings.Contains(e.Message, contains)
		}))
	}, timeout, tick, "%s Event on %s containing %q", reason, object, contains)
}

// failJobPods makes the Pods of a Job fail with exit code 3, through kwok's
// chaos stage (test/cluster loads pod/chaos/pod-container-running-failed):
// the label, put on as soon as the Pod exists, makes kwok fail its container
// instead of completing it.
func failJobPods(t *testing.T, ns, job string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	labelled := map[string]bool{}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"},"annotations":{%q:"3",%q:"Error",%q:"prepare script failed"}}}`,
		chaosLabel, chaosExitCode, chaosReason, chaosMessage)
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		pods, err := client().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: jobNameLabel + "=" + job})
		if err != nil {
			return
		}
		for _, p := range pods.Items {
			if labelled[p.Name] {
				continue
			}
			if _, err := client().CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
				labelled[p.Name] = true
			}
		}
	}, 50*time.Millisecond)
}

func TestPrepareFromImage(t *testing.T) {
	startManager(t)
	ns := env.Namespace(t, "")
	createPVC(t, pvc(ns, "data", map[string]string{
		api.AnnotationPrepareFromImage: "busybox:1.36",
		api.AnnotationPrepareCommand:   `["sh","-c"]`,
		api.AnnotationPrepareArgs:      `["echo hi > /workspace/hello"]`,
	}))
	p := waitPhase(t, ns, "data", api.PhaseSucceeded, "0")
	assert.Equal(t, "prepare-data-0", p.Annotations[api.AnnotationPrepareJob])
	jobs := jobsOf(t, ns, p)
	require.Len(t, jobs, 1)
	j := jobs[0]
	c := j.Spec.Template.Spec.Containers[0]
	assert.Equal(t, int32(0), *j.Spec.BackoffLimit)
	assert.Equal(t, "busybox:1.36", c.Image)
	assert.Equal(t, []string{"sh", "-c"}, c.Command)
	assert.Equal(t, []string{"echo hi > /workspace/hello"}, c.Args)
	assert.Equal(t, "/workspace", c.VolumeMounts[0].MountPath)
	assert.Equal(t, "data", j.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName)
	waitEvent(t, 10*time.Second, ns, "data", "PrepareSucceeded", "succeeded")

	// Deleting the PVC removes its Jobs through the owner reference.
	require.NoError(t, client().CoreV1().PersistentVolumeClaims(ns).Delete(context.Background(), "data", metav1.DeleteOptions{}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := client().BatchV1().Jobs(ns).Get(context.Background(), j.Name, metav1.GetOptions{})
		if assert.True(c, apierrors.IsNotFound(err), "Job still there (err %v)", err) {
			return
		}
		p, perr := client().CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), "data", metav1.GetOptions{})
		if perr == nil {
			c.Errorf("PVC still there: deleting %v, finalizers %v", p.DeletionTimestamp, p.Finalizers)
		}
	}, 60*time.Second, tick, "the Job to be garbage collected")
}

func TestPrepareFailsThenRecovers(t *testing.T) {
	startManager(t)
	ns := env.Namespace(t, "")
	failJobPods(t, ns, "prepare-data-0")
	createPVC(t, pvc(ns, "data", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}))
	p := waitPhase(t, ns, "data", api.PhaseFailed, "0")
	msg := p.Annotations[api.AnnotationPrepareMessage]
	for _, want := range []string{"BackoffLimitExceeded", "exited with code 3", "prepare script failed", api.AnnotationPrepareAttempt} {
		assert.Contains(t, msg, want)
	}
	waitEvent(t, 10*time.Second, ns, "data", "PrepareFailed", "exited with code 3")
	jobs := jobsOf(t, ns, p)
	require.Len(t, jobs, 1)
	failed := jobs[0]

	annotatePVC(t, ns, "data", api.AnnotationPrepareAttempt, ptr.To("1"))
	p = waitPhase(t, ns, "data", api.PhaseSucceeded, "1")
	assert.Equal(t, "prepare-data-1", p.Annotations[api.AnnotationPrepareJob])
	// Failed is terminal: no retry until the attempt is bumped. The barrier
	// is the controller's own record of attempt 1: the work queue handles a
	// PVC in order, so whatever it did with attempt 0 happened before. The
	// failed Job is the one it had (same UID: never deleted and redone),
	// and attempt 1 added exactly one.
	jobs = jobsOf(t, ns, p)
	require.Len(t, jobs, 2, "one Job per attempt")
	i := slices.IndexFunc(jobs, func(j batchv1.Job) bool { return j.Name == failed.Name })
	require.GreaterOrEqual(t, i, 0, "Job of attempt 0 gone")
	assert.Equal(t, failed.UID, jobs[i].UID, "Job of attempt 0 was recreated")
}

func TestPrepareFromPVCWaitsForSource(t *testing.T) {
	startManager(t)
	ns := env.Namespace(t, "")
	createPVC(t, pvc(ns, "copy", map[string]string{api.AnnotationPrepareFromPVC: "base"}))
	p := waitPhase(t, ns, "copy", api.PhasePending, "0")
	assert.Contains(t, p.Annotations[api.AnnotationPrepareMessage], "waiting for source PVC base")
	createPVC(t, pvc(ns, "base", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}))
	// Until the source has Succeeded, the copy has no Job: watch the two
	// until either the source is ready or a copy Job shows up.
	require.Eventually(t, func() bool {
		src := getPVC(t, ns, "base")
		if n := len(jobsOf(t, ns, getPVC(t, ns, "copy"))); n != 0 {
			assert.True(t, pvcspec.Ready(getPVC(t, ns, "base")), "copy Job created while the source is %q", pvcspec.StatusOf(src).Phase)
			return true
		}
		return pvcspec.Ready(src)
	}, 60*time.Second, 100*time.Millisecond, "the source to be prepared")
	p = waitPhase(t, ns, "copy", api.PhaseSucceeded, "0")
	jobs := jobsOf(t, ns, p)
	require.Len(t, jobs, 1, "copy Jobs")
	spec := jobs[0].Spec.Template.Spec
	c := spec.Containers[0]
	assert.Equal(t, testImage, c.Image)
	assert.Equal(t, []string{"runplane-copy", "--from", "/source", "--to", "/workspace"}, c.Command)
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool {
		return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "base"
	})
	require.GreaterOrEqual(t, i, 0, "source volume: %+v", spec.Volumes)
	assert.True(t, spec.Volumes[i].PersistentVolumeClaim.ReadOnly, "source volume read-only")
	assert.True(t, slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == spec.Volumes[i].Name && m.ReadOnly }),
		"source mounted read-only: %+v", c.VolumeMounts)
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
	ns := env.Namespace(t, "")
	ctx := context.Background()
	createPVC(t, pvc(ns, "data", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}))
	_, err := client().CoreV1().Pods(ns).Create(ctx, gatedPod(ns, "worker", "data"), metav1.CreateOptions{})
	require.NoError(t, err)
	// While the PVC is not prepared, the Pod keeps its gate and no node.
	// The condition runs off the test goroutine: it reports API errors
	// instead of failing there.
	prepared := func() (bool, error) {
		p, err := client().CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
		return err == nil && pvcspec.Ready(p), err
	}
	require.Eventually(t, func() bool {
		if ok, err := prepared(); ok || !assert.NoError(t, err) {
			return true
		}
		pod, err := client().CoreV1().Pods(ns).Get(ctx, "worker", metav1.GetOptions{})
		if !assert.NoError(t, err) {
			return true
		}
		if len(pod.Spec.SchedulingGates) == 0 || pod.Spec.NodeName != "" {
			// Released right after Succeeded is fine.
			ok, err := prepared()
			assert.NoError(t, err)
			assert.True(t, ok, "Pod released before its PVC was prepared: gates %v node %q",
				pod.Spec.SchedulingGates, pod.Spec.NodeName)
			return true
		}
		return false
	}, 60*time.Second, 100*time.Millisecond, "the PVC to be prepared")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pod, err := client().CoreV1().Pods(ns).Get(ctx, "worker", metav1.GetOptions{})
		require.NoError(c, err)
		assert.Empty(c, pod.Spec.SchedulingGates)
		assert.NotEmpty(c, pod.Spec.NodeName)
	}, 30*time.Second, tick, "the Pod to be ungated and scheduled")
}

func TestGateEventOnFailure(t *testing.T) {
	startManager(t)
	ns := env.Namespace(t, "")
	failJobPods(t, ns, "prepare-data-0")
	createPVC(t, pvc(ns, "data", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}))
	_, err := client().CoreV1().Pods(ns).Create(context.Background(), gatedPod(ns, "worker", "data"), metav1.CreateOptions{})
	require.NoError(t, err)
	waitPhase(t, ns, "data", api.PhaseFailed, "0")
	waitEvent(t, 20*time.Second, ns, "worker", "StoragePrepareFailed", "data")
	pod, err := client().CoreV1().Pods(ns).Get(context.Background(), "worker", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Len(t, pod.Spec.SchedulingGates, 1, "a Pod whose PVC failed lost its gate")
}

func TestAccessorAppearsAndGoes(t *testing.T) {
	startManager(t)
	ns := env.Namespace(t, "")
	ctx := context.Background()
	createPVC(t, pvc(ns, "data", nil))
	// A Pod already mounts the ReadWriteOnce volume on node-b.
	user := gatedPod(ns, "user", "data")
	user.Spec.SchedulingGates = nil
	user.Spec.NodeName = "node-b"
	_, err := client().CoreV1().Pods(ns).Create(ctx, user, metav1.CreateOptions{})
	require.NoError(t, err)
	annotatePVC(t, ns, "data", api.AnnotationAccessor, ptr.To(api.AccessorEnabled))
	name := accessor.Name("data")
	var dep *appsv1.Deployment
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		dep, err = client().AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(c, err)
		_, err = client().CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(c, err)
	}, 30*time.Second, tick, "accessor Deployment and Service")
	// Only the PVC's namespace reaches it (and every request is authorized).
	var np *networkingv1.NetworkPolicy
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		np, err = client().NetworkingV1().NetworkPolicies(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(c, err)
	}, 30*time.Second, tick, "accessor NetworkPolicy")
	assert.Equal(t, dep.Spec.Template.Labels, np.Spec.PodSelector.MatchLabels, "the policy selects the accessor Pod")
	require.Len(t, np.Spec.Ingress, 1)
	assert.Equal(t, []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}, np.Spec.Ingress[0].From, "only the PVC's namespace")
	assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes)
	spec := dep.Spec.Template.Spec
	c := spec.Containers[0]
	assert.Equal(t, testImage, c.Image)
	assert.Equal(t, "runplane-accessor", c.Command[0])
	assert.True(t, c.VolumeMounts[0].ReadOnly, "mount read-only")
	assert.True(t, spec.Volumes[0].PersistentVolumeClaim.ReadOnly, "volume read-only")
	terms := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	require.Len(t, terms, 1)
	assert.Equal(t, []string{"node-b"}, terms[0].MatchFields[0].Values, "accessor pinned to node-b")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		p := getPVC(t, ns, "data")
		assert.Equal(c, api.AccessorReady, p.Annotations[api.AnnotationAccessorPhase])
		assert.Equal(c, fmt.Sprintf("http://%s.%s.svc.cluster.local/", name, ns), p.Annotations[api.AnnotationAccessorURL])
	}, 60*time.Second, tick, "accessor Ready with its URL")

	annotatePVC(t, ns, "data", api.AnnotationAccessor, nil)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, derr := client().AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(derr), "Deployment: %v", derr)
		_, serr := client().CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(serr), "Service: %v", serr)
		_, nerr := client().NetworkingV1().NetworkPolicies(ns).Get(ctx, name, metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(nerr), "NetworkPolicy: %v", nerr)
		p := getPVC(t, ns, "data")
		assert.NotContains(c, p.Annotations, api.AnnotationAccessorURL)
		assert.NotContains(c, p.Annotations, api.AnnotationAccessorPhase)
	}, 30*time.Second, tick, "accessor objects and annotations removed")
}

// TestEgressPolicy: the egress NetworkPolicy follows pool Pods, and no NATS
// credential is ever copied into their namespace (sidecars present their
// own Pod-bound token).
func TestEgressPolicy(t *testing.T) {
	startManager(t)
	ensureNamespace(t, api.DefaultNamespace)
	ns := env.Namespace(t, "")
	ctx := context.Background()
	worker := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "worker", Namespace: ns, Labels: map[string]string{api.LabelPool: "echo", api.LabelEgress: api.EgressRestricted}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox:1.36"}}},
	}
	_, err := client().CoreV1().Pods(ns).Create(ctx, worker, metav1.CreateOptions{})
	require.NoError(t, err)
	var np *networkingv1.NetworkPolicy
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		np, err = client().NetworkingV1().NetworkPolicies(ns).Get(ctx, egress.PolicyName, metav1.GetOptions{})
		require.NoError(c, err)
	}, 30*time.Second, tick, "egress NetworkPolicy")
	checkPolicy(t, np)

	// The policy is the controllers' answer to the Pod: by now the former
	// natssecret controller would have copied the shared token.
	secrets, err := client().CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, secrets.Items, "Secrets in the tenant namespace")

	require.NoError(t, client().CoreV1().Pods(ns).Delete(ctx, "worker", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, perr := client().NetworkingV1().NetworkPolicies(ns).Get(ctx, egress.PolicyName, metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(perr), "NetworkPolicy: %v", perr)
	}, 30*time.Second, tick, "policy removed with the last Pod")
}

func checkPolicy(t *testing.T, np *networkingv1.NetworkPolicy) {
	t.Helper()
	assert.Equal(t, api.EgressRestricted, np.Spec.PodSelector.MatchLabels[api.LabelEgress])
	assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, np.Spec.PolicyTypes)
	var dns, public, nats bool
	for _, r := range np.Spec.Egress {
		require.NotEmpty(t, r.To, "a rule to every destination: %+v", r)
		switch {
		case r.To[0].IPBlock != nil:
			for _, peer := range r.To {
				if peer.IPBlock.CIDR == "0.0.0.0/0" {
					for _, cidr := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16"} {
						assert.Contains(t, peer.IPBlock.Except, cidr, "private range not denied")
					}
					public = true
				}
			}
			for _, p := range r.Ports {
				assert.False(t, p.Port.IntVal <= 53 && 53 <= ptr.Deref(p.EndPort, p.Port.IntVal), "port 53 open to the internet: %+v", p)
			}
		case r.To[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] == "kube-system":
			dns = r.To[0].PodSelector.MatchLabels["k8s-app"] == "kube-dns" && r.Ports[0].Port.IntVal == 53
		case r.To[0].PodSelector != nil:
			nats = r.To[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] == api.DefaultNamespace &&
				r.To[0].PodSelector.MatchLabels["app.kubernetes.io/name"] == "nats" && r.Ports[0].Port.IntVal == 4222
		}
	}
	assert.True(t, dns && public && nats, "policy rules dns=%t public=%t nats=%t: %+v", dns, public, nats, np.Spec.Egress)
}

// TestEgressAdminModeKeepsNoPolicy: in adminNetworkPolicy mode (the chart's
// default) the cluster-scoped AdminNetworkPolicy restricts pool Pods; the
// controller keeps no namespaced policy and deletes the one networkPolicy
// mode left.
func TestEgressAdminModeKeepsNoPolicy(t *testing.T) {
	startManager(t, func(c *controllers.Config) { c.Egress.Enforcement = egress.EnforcementAdminNetworkPolicy })
	ns := env.Namespace(t, "")
	ctx := context.Background()
	left := egress.Policy(ns, egressSettings())
	_, err := client().NetworkingV1().NetworkPolicies(ns).Create(ctx, left, metav1.CreateOptions{})
	require.NoError(t, err)
	worker := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "worker", Namespace: ns, Labels: map[string]string{api.LabelPool: "echo", api.LabelEgress: api.EgressRestricted}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox:1.36"}}},
	}
	_, err = client().CoreV1().Pods(ns).Create(ctx, worker, metav1.CreateOptions{})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, perr := client().NetworkingV1().NetworkPolicies(ns).Get(ctx, egress.PolicyName, metav1.GetOptions{})
		assert.True(c, apierrors.IsNotFound(perr), "NetworkPolicy: %v", perr)
	}, 30*time.Second, tick, "the networkPolicy mode's policy removed")
}

func TestRestartedControllerMakesNoDuplicate(t *testing.T) {
	stop := startManager(t)
	ns := env.Namespace(t, "")
	ctx := context.Background()
	// The attempt may still run, or have finished, across the restart.
	createPVC(t, pvc(ns, "data", map[string]string{api.AnnotationPrepareFromImage: "busybox:1.36"}))
	require.Eventually(t, func() bool { return len(jobsOf(t, ns, getPVC(t, ns, "data"))) == 1 }, 30*time.Second, tick, "the prepare Job")
	stop()
	// Lose the status as a crash between creating the Job and recording it
	// would, then run a fresh controller.
	for _, k := range []string{api.AnnotationPreparePhase, api.AnnotationPrepareJob, api.AnnotationPrepareMessage, api.AnnotationPrepareObservedAttempt} {
		annotatePVC(t, ns, "data", k, nil)
	}
	startManager(t)
	p := waitPhase(t, ns, "data", api.PhaseSucceeded, "0")
	require.Len(t, jobsOf(t, ns, p), 1, "Jobs after a restart")
	_, err := client().BatchV1().Jobs(ns).Get(ctx, "prepare-data-0", metav1.GetOptions{})
	require.NoError(t, err)
}

func TestInvalidAnnotationsReported(t *testing.T) {
	startManager(t)
	ns := env.Namespace(t, "")
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
		t.Run(tt.name, func(t *testing.T) {
			require.Eventually(t, func() bool {
				return getPVC(t, ns, tt.name).Annotations[api.AnnotationPreparePhase] == api.PhaseFailed
			}, 30*time.Second, tick, "phase Failed")
			p := getPVC(t, ns, tt.name)
			assert.Contains(t, p.Annotations[api.AnnotationPrepareMessage], tt.want)
			assert.Empty(t, jobsOf(t, ns, p), "Jobs for invalid annotations")
		})
	}
}
