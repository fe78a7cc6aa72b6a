package accessor

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/eventstest"
)

const (
	testNS  = "team"
	testURL = "http://accessor-data.team.svc.cluster.local/"
)

func claim(annotations map[string]string, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	if len(modes) == 0 {
		modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: testNS, UID: "pvc-uid", Annotations: annotations},
		Spec:       corev1.PersistentVolumeClaimSpec{AccessModes: modes},
	}
}

func enabled(extra ...string) map[string]string {
	a := map[string]string{api.AnnotationAccessor: api.AccessorEnabled}
	for i := 0; i+1 < len(extra); i += 2 {
		a[extra[i]] = extra[i+1]
	}
	return a
}

func user(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "busybox"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// owned is an accessor object of the PVC "data" (or of another owner).
func owned[T client.Object](obj T, ownerUID types.UID) T {
	obj.SetName(Name("data"))
	obj.SetNamespace(testNS)
	obj.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "PersistentVolumeClaim", Name: "data", UID: ownerUID, Controller: ptr.To(true)}})
	return obj
}

func deploymentWith(status appsv1.DeploymentStatus) *appsv1.Deployment {
	d := owned(&appsv1.Deployment{}, "pvc-uid")
	d.Status = status
	return d
}

func TestReconcile(t *testing.T) {
	tests := []struct {
		name        string
		objects     []client.Object
		wantObjects bool   // Deployment and Service exist afterwards
		wantPhase   string // accessor-phase ("" = absent; accessor-url then too)
		wantNode    string // required node of the Deployment
		wantEvent   string // "<type> <reason>" of the one Event, "" for none
	}{{
		name:        "enabled: Deployment and Service created, Pending",
		objects:     []client.Object{claim(enabled())},
		wantObjects: true, wantPhase: api.AccessorPending, wantEvent: "Normal AccessorPending",
	}, {
		name:        "ReadWriteOnce mounted by a running Pod: pinned to its node",
		objects:     []client.Object{claim(enabled()), user("b", "node-b"), user("unscheduled", "")},
		wantObjects: true, wantPhase: api.AccessorPending, wantNode: "node-b", wantEvent: "Normal AccessorPending",
	}, {
		name:        "ReadWriteMany: never pinned",
		objects:     []client.Object{claim(enabled(), corev1.ReadWriteOnce, corev1.ReadWriteMany), user("b", "node-b")},
		wantObjects: true, wantPhase: api.AccessorPending, wantEvent: "Normal AccessorPending",
	}, {
		name: "a replica available: Ready",
		objects: []client.Object{claim(enabled(api.AnnotationAccessorPhase, api.AccessorPending, api.AnnotationAccessorURL, testURL)),
			deploymentWith(appsv1.DeploymentStatus{AvailableReplicas: 1})},
		wantObjects: true, wantPhase: api.AccessorReady, wantEvent: "Normal AccessorReady",
	}, {
		name: "progress deadline passed: Failed",
		objects: []client.Object{claim(enabled(api.AnnotationAccessorPhase, api.AccessorPending, api.AnnotationAccessorURL, testURL)),
			deploymentWith(appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{{
				Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded"}}})},
		wantObjects: true, wantPhase: api.AccessorFailed, wantEvent: "Warning AccessorFailed",
	}, {
		name: "unchanged: no write, no Event",
		objects: []client.Object{claim(enabled(api.AnnotationAccessorPhase, api.AccessorReady, api.AnnotationAccessorURL, testURL)),
			deploymentWith(appsv1.DeploymentStatus{AvailableReplicas: 1})},
		wantObjects: true, wantPhase: api.AccessorReady,
	}, {
		name: "annotation removed: objects and annotations go",
		objects: []client.Object{claim(map[string]string{api.AnnotationAccessorPhase: api.AccessorReady, api.AnnotationAccessorURL: testURL}),
			deploymentWith(appsv1.DeploymentStatus{}), owned(&corev1.Service{}, "pvc-uid")},
		wantEvent: "Normal AccessorRemoved",
	}, {
		name:      "invalid value: Warning, nothing published",
		objects:   []client.Object{claim(map[string]string{api.AnnotationAccessor: "yes"})},
		wantEvent: "Warning AccessorInvalid",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithObjects(tt.objects...).WithIndex(&corev1.Pod{}, indexClaims, mountedClaims).Build()
			rec := events.NewFakeRecorder(10)
			r := &Reconciler{Client: c, Recorder: rec, Options: Options{Image: "runplane:test", ClusterDomain: "cluster.local"}}
			ctx := context.Background()

			_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "data"}})
			require.NoError(t, err)

			var pvc corev1.PersistentVolumeClaim
			require.NoError(t, c.Get(ctx, types.NamespacedName{Namespace: testNS, Name: "data"}, &pvc))
			assert.Equal(t, tt.wantPhase, pvc.Annotations[api.AnnotationAccessorPhase])
			wantURL := ""
			if tt.wantPhase != "" {
				wantURL = testURL
			}
			assert.Equal(t, wantURL, pvc.Annotations[api.AnnotationAccessorURL])

			key := types.NamespacedName{Namespace: testNS, Name: Name("data")}
			var dep appsv1.Deployment
			derr := c.Get(ctx, key, &dep)
			serr := c.Get(ctx, key, &corev1.Service{})
			if !tt.wantObjects {
				assert.True(t, apierrors.IsNotFound(derr), "Deployment: %v", derr)
				assert.True(t, apierrors.IsNotFound(serr), "Service: %v", serr)
			} else {
				require.NoError(t, derr)
				require.NoError(t, serr)
				checkDeployment(t, &dep, tt.wantNode)
			}

			var want []string
			if tt.wantEvent != "" {
				want = []string{tt.wantEvent}
			}
			assert.Equal(t, want, eventstest.Drain(rec))
		})
	}
}

// checkDeployment: runplane-accessor from the runplane image, the PVC
// mounted read-only, locked down, pinned to node when given.
func checkDeployment(t *testing.T, dep *appsv1.Deployment, node string) {
	t.Helper()
	spec := dep.Spec.Template.Spec
	require.Len(t, spec.Containers, 1)
	c := spec.Containers[0]
	assert.Equal(t, "runplane:test", c.Image)
	assert.Equal(t, []string{"runplane-accessor", "--root", "/data", "--listen", ":8080",
		"--namespace", testNS, "--claim", "data", "--ca-file", "/var/run/runplane/kube-ca/ca.crt"}, c.Command)
	assert.Equal(t, []corev1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: true},
		{Name: "kube-ca", MountPath: "/var/run/runplane/kube-ca", ReadOnly: true}}, c.VolumeMounts)
	require.Len(t, spec.Volumes, 2)
	assert.Equal(t, &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data", ReadOnly: true}, spec.Volumes[0].PersistentVolumeClaim)
	// The API server's CA from the public ConfigMap; no Secret, no token.
	require.NotNil(t, spec.Volumes[1].ConfigMap)
	assert.Equal(t, "kube-root-ca.crt", spec.Volumes[1].ConfigMap.Name)
	for _, v := range spec.Volumes {
		assert.Nil(t, v.Secret)
		assert.Nil(t, v.Projected)
	}
	assert.Equal(t, "default", spec.ServiceAccountName)
	// Pod Security "restricted".
	require.NotNil(t, spec.SecurityContext)
	assert.True(t, *spec.SecurityContext.RunAsNonRoot)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, spec.SecurityContext.SeccompProfile.Type)
	require.NotNil(t, c.ReadinessProbe.TCPSocket, "the kubelet has no token: readiness is the socket")
	assert.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
	assert.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
	assert.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
	assert.False(t, *spec.AutomountServiceAccountToken)
	assert.Equal(t, api.ManagedByController, dep.Labels[api.LabelManagedBy])
	if node == "" {
		assert.Nil(t, spec.Affinity)
		return
	}
	terms := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	assert.Equal(t, []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
		Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}, terms)
}

// TestUserObjectsAreNotDeleted: a Deployment of the accessor's name that the
// PVC does not control is left alone when the accessor goes.
func TestUserObjectsAreNotDeleted(t *testing.T) {
	mine := owned(&appsv1.Deployment{}, "someone-else")
	c := fake.NewClientBuilder().WithObjects(claim(map[string]string{api.AnnotationAccessorPhase: api.AccessorReady}), mine).Build()
	r := &Reconciler{Client: c, Recorder: events.NewFakeRecorder(10), Options: Options{Image: "runplane:test", ClusterDomain: "cluster.local"}}
	_, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: testNS, Name: "data"}})
	require.NoError(t, err)
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(mine), &appsv1.Deployment{}))
}

func TestName(t *testing.T) {
	long := strings.Repeat("a", 70)
	tests := []struct{ pvc, want string }{
		{"data", "accessor-data"},
		{"team.data", ""},
		{long, ""},
	}
	for _, tt := range tests {
		t.Run(tt.pvc, func(t *testing.T) {
			got := Name(tt.pvc)
			assert.LessOrEqual(t, len(got), 63)
			assert.NotContains(t, got, ".")
			if tt.want != "" {
				assert.Equal(t, tt.want, got)
			}
		})
	}
	assert.NotEqual(t, Name(long), Name(long+"b"))
}
