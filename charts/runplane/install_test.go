package chart_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/bootstrapsecret"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/cluster"
)

// stubCRD is a CRD of group's kind (v1) with an open schema: enough for
// the API server to accept the chart's objects of the Prometheus Operator
// and cert-manager and for helm's capability check
// (.Capabilities.APIVersions) to see them. The AdminNetworkPolicy CRDs are
// the real ones (networkPolicyCRDs).
func stubCRD(group, kind string) (name, manifest string) {
	singular := strings.ToLower(kind)
	name = singular + "s." + group
	return name, fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: %s}
spec:
  group: %s
  scope: Namespaced
  names: {kind: %s, plural: %ss, singular: %s, listKind: %sList}
  versions:
    - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
`, name, group, kind, singular, singular, kind)
}

func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return run(t, "kubectl", args...)
}

func ensureStubCRDs(t *testing.T) {
	t.Helper()
	established := []string{"wait", "--for=condition=Established", "--timeout=60s",
		"crd/adminnetworkpolicies.policy.networking.k8s.io", "crd/baselineadminnetworkpolicies.policy.networking.k8s.io"}
	var manifests []string
	for _, k := range [][2]string{{"monitoring.coreos.com", "PodMonitor"}, {"monitoring.coreos.com", "ServiceMonitor"}, {"cert-manager.io", "Certificate"}, {"cert-manager.io", "Issuer"}} {
		name, manifest := stubCRD(k[0], k[1])
		established, manifests = append(established, "crd/"+name), append(manifests, manifest)
	}
	path := filepath.Join(t.TempDir(), "crds.yaml")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(manifests, "---\n")), 0o600))
	out, err := kubectl(t, "apply", "-f", path)
	require.NoError(t, err)
	t.Log(strings.TrimSpace(out))
	// The real AdminNetworkPolicy CRDs: the API server validates the chart's
	// policy against their schema and CEL rules (CIDRs, at most 25 networks
	// a peer, one field a peer).
	for _, crd := range networkPolicyCRDs(t) {
		_, err := kubectl(t, "apply", "--server-side", "--force-conflicts", "--field-manager=chart-test", "-f", crd)
		require.NoError(t, err)
	}
	_, err = kubectl(t, established...)
	require.NoError(t, err)
}

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	_, err := env.Client().CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

// TestServerSideDryRun: every object of every render is accepted by the
// real kube-apiserver (schema, defaulting, validation, admission) in a
// server-side dry run.
func TestServerSideDryRun(t *testing.T) {
	needHelm(t)
	needCluster(t)
	ensureStubCRDs(t)
	const ns, stockNS, testNS = "dryrun-system", "dryrun-stock", "dryrun-helm-test"
	ensureNamespace(t, ns)
	ensureNamespace(t, stockNS)
	ensureNamespace(t, testNS) // the helm test's objects live there; a dry run creates no namespace
	// values-full's DRA stock pool renders into these tenant namespaces.
	ensureNamespace(t, "team-a")
	ensureNamespace(t, "team-b")
	// Nor a ServiceAccount: the helm test's Pod is admitted only if its
	// ServiceAccount exists.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "runplane-helm-test-caller", Namespace: testNS}}
	if _, err := env.Client().CoreV1().ServiceAccounts(testNS).Create(t.Context(), sa, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	for _, c := range renderCases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"template", "runplane", ".", "--namespace", ns, "--kube-version", cluster.KubernetesVersion, "--set", "stock.namespace=" + stockNS, "--set", "helmTest.namespace=" + testNS}, c.args...)
			manifests := mustRun(t, "helm", args...)
			objs := parse(t, manifests)
			path := filepath.Join(t.TempDir(), "manifests.yaml")
			require.NoError(t, os.WriteFile(path, []byte(manifests), 0o600))
			out, err := kubectl(t, "apply", "--dry-run=server", "--server-side", "--field-manager=chart-test", "-f", path)
			require.NoError(t, err)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, len(objs), "%d objects rendered, the API server answered for %d:\n%s", len(objs), len(lines), out)
			for _, l := range lines {
				assert.True(t, strings.Contains(l, "(server dry run)"), "not a server dry run: %s", l)
			}
			t.Logf("%d objects accepted", len(objs))
		})
	}
}

// TestInstall installs the chart into the local control plane (kwok nodes
// run no containers, but every object, the RBAC and the webhook
// configurations are real), checks what the cluster does with them, checks
// RBAC with kubectl auth can-i, and upgrades.
func TestInstall(t *testing.T) {
	needHelm(t)
	needCluster(t)
	ensureStubCRDs(t) // so the ServiceMonitors are rendered from the cluster's capabilities
	ctx := t.Context()
	client := env.Client()
	ns := releaseNamespace

	mustRun(t, "helm", "install", "runplane", ".", "--namespace", ns, "--create-namespace",
		"--values", "testdata/values-install.yaml", "--timeout", "2m")
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := kubectl(t, "get", "all,events", "-A")
			t.Logf("cluster state:\n%s", out)
		}
	})

	t.Run("objects", func(t *testing.T) {
		for _, d := range []string{"runplane-webhook", "runplane-controller", "runplane-queue", "runplane-scheduler"} {
			_, err := client.AppsV1().Deployments(ns).Get(ctx, d, metav1.GetOptions{})
			assert.NoError(t, err, "Deployment %s", d)
		}
		_, err := client.AppsV1().StatefulSets(ns).Get(ctx, "runplane-nats", metav1.GetOptions{})
		assert.NoError(t, err, "StatefulSet runplane-nats")
		for _, pc := range []string{api.PriorityClassWorkload, api.PriorityClassStock} {
			_, err := client.SchedulingV1().PriorityClasses().Get(ctx, pc, metav1.GetOptions{})
			assert.NoError(t, err, "PriorityClass %s", pc)
		}
		m, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "runplane-webhook", metav1.GetOptions{})
		require.NoError(t, err)
		var names []string
		for _, w := range m.Webhooks {
			names = append(names, w.Name)
		}
		assert.Equal(t, "gpu-spec.runplane.io,stock.runplane.io,pool.runplane.io,ssh.runplane.io,storage-gate.runplane.io,credentials.runplane.io", strings.Join(names, ","), "mutating webhooks")
		out, err := kubectl(t, "get", "servicemonitors", "-n", ns, "-o", "name")
		require.NoError(t, err)
		assert.EqualValues(t, 4, strings.Count(out, "servicemonitor"), "want 4 ServiceMonitors (the cluster serves monitoring.coreos.com/v1), got:\n%s", out)
	})

	t.Run("workloads become ready", func(t *testing.T) {
		// kwok runs no containers but moves Pods to Running and Ready: this
		// proves the Pods schedule (the NATS claims bind, nothing is refused
		// by admission or a quota) and the Deployments roll out.
		err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			for _, d := range []string{"runplane-webhook", "runplane-controller", "runplane-queue", "runplane-scheduler"} {
				dep, err := client.AppsV1().Deployments(ns).Get(ctx, d, metav1.GetOptions{})
				if err != nil || dep.Status.ReadyReplicas != *dep.Spec.Replicas {
					return false, nil
				}
			}
			sts, err := client.AppsV1().StatefulSets(ns).Get(ctx, "runplane-nats", metav1.GetOptions{})
			return err == nil && sts.Status.ReadyReplicas == *sts.Spec.Replicas, nil
		})
		if err != nil {
			out, _ := kubectl(t, "get", "pods,pvc", "-n", ns, "-o", "wide")
			t.Fatalf("runplane's workloads did not become ready: %v\n%s", err, out)
		}
	})

	t.Run("admission", func(t *testing.T) {
		// The webhook's Pods run no process here, so every call to it fails:
		// that shows exactly which objects the configurations select.
		ensureNamespace(t, "team-a")
		pod := func(name string, labels map[string]string, claim string) *corev1.Pod {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
			}
			if claim != "" {
				p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
			}
			return p
		}
		for _, c := range []struct {
			name, namespace string
			pod             *corev1.Pod
			webhook         string // "" = admitted without calling the webhook
		}{
			{"unlabelled pod", "team-a", pod("plain", nil, ""), ""},
			{"unrelated label", "team-a", pod("other", map[string]string{"app": "x"}, ""), ""},
			{"gpu-spec", "team-a", pod("gpu", map[string]string{api.LabelGPUSpec: "g1.1"}, ""), "gpu-spec.runplane.io"},
			{"stock", "team-a", pod("stock", map[string]string{api.LabelStock: "g1.1"}, ""), "stock.runplane.io"},
			{"pool", "team-a", pod("worker", map[string]string{api.LabelPool: "echo"}, ""), "pool.runplane.io"},
			{"ssh", "team-a", pod("devbox", map[string]string{api.LabelSSH: api.SSHEnabled}, ""), "ssh.runplane.io"},
			{"mounts a claim", "team-a", pod("mounts", nil, "data"), "storage-gate.runplane.io"},
			// No label exempts a Pod: runplane's own are told apart by the requester.
			{"runplane's managed-by label", "team-a", pod("prepare", map[string]string{api.LabelManagedBy: api.ManagedByController}, "data"), "storage-gate.runplane.io"},
			{"references runplane's Secret", "team-a", func() *corev1.Pod {
				p := pod("reader", nil, "")
				p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "runplane-nats-credentials"}}}}
				return p
			}(), "credentials.runplane.io"},
			{"kube-system is excluded", "kube-system", pod("gpu", map[string]string{api.LabelGPUSpec: "g1.1"}, ""), ""},
			{"the release namespace is excluded", ns, pod("gpu", map[string]string{api.LabelGPUSpec: "g1.1"}, ""), ""},
		} {
			t.Run(c.name, func(t *testing.T) {
				created, err := client.CoreV1().Pods(c.namespace).Create(ctx, c.pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				switch c.webhook {
				case "":
					require.NoError(t, err, "refused")
					require.Equal(t, c.pod.Name, created.Name)
				default:
					require.Error(t, err, "admitted; want a call to webhook %s (failurePolicy Fail)", c.webhook)
					require.Contains(t, err.Error(), `failed calling webhook "`+c.webhook+`"`)
				}
			})
		}
		// Policy runplane-gpu runs in the API server, webhook or not.
		gpus := pod("gpus", nil, "")
		gpus.Spec.Containers[0].Resources.Limits = corev1.ResourceList{api.DefaultGPUResource: resource.MustParse("8")}
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := client.CoreV1().Pods("team-a").Create(ctx, gpus, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil && strings.Contains(err.Error(), "request GPUs"), nil
		})
		assert.NoError(t, err, "an unlabelled Pod asking for GPUs: want a denial by policy runplane-gpu")
		claim := func(name string, annotations map[string]string) *corev1.PersistentVolumeClaim {
			return &corev1.PersistentVolumeClaim{
				ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}
		}
		_, err = client.CoreV1().PersistentVolumeClaims("team-a").Create(ctx, claim("plain", map[string]string{"other.io/x": "y"}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		assert.NoError(t, err, "a claim without runplane annotations was refused")
		_, err = client.CoreV1().PersistentVolumeClaims("team-a").Create(ctx, claim("prepared", map[string]string{api.AnnotationPrepareFromImage: "busybox"}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		assert.ErrorContains(t, err, `failed calling webhook "pvc.runplane.io"`, "a claim with %s: want a failed call to pvc.runplane.io, got %v", api.AnnotationPrepareFromImage, err)
	})

	t.Run("stock pool pods go through the webhook", func(t *testing.T) {
		// A placeholder the ReplicaSet made before helm created the webhook
		// configuration was admitted without it (helm installs webhook
		// configurations last); delete it so the replacement meets the webhook.
		require.NoError(t, client.CoreV1().Pods("install-stock").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "runplane.io/stock"}))
		// The ReplicaSet of the stock Deployment reports the webhook it called.
		err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			evs, err := client.CoreV1().Events("install-stock").List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, e := range evs.Items {
				if e.Reason == "FailedCreate" && strings.Contains(e.Message, `"stock.runplane.io"`) {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			out, _ := kubectl(t, "get", "deploy,rs,events", "-n", "install-stock")
			t.Fatalf("no FailedCreate event naming stock.runplane.io: %v\n%s", err, out)
		}
	})

	t.Run("rbac", func(t *testing.T) {
		ensureNamespace(t, "team-a")
		sa := func(name string) string { return "system:serviceaccount:" + ns + ":" + name }
		for _, c := range []struct {
			who  string
			args []string
			want bool
		}{
			// Nobody reads Secrets cluster-wide.
			{"runplane-webhook", []string{"get", "secrets", "-A"}, false},
			{"runplane-webhook", []string{"list", "secrets", "-A"}, false},
			{"runplane-controller", []string{"get", "secrets", "-A"}, false},
			{"runplane-controller", []string{"list", "secrets", "-A"}, false},
			{"runplane-controller", []string{"watch", "secrets", "-A"}, false},
			{"runplane-queue", []string{"get", "secrets", "-A"}, false},
			{"runplane-queue", []string{"list", "secrets", "-A"}, false},
			{"runplane-scheduler", []string{"get", "secrets", "-A"}, false},
			{"runplane-scheduler", []string{"list", "secrets", "-A"}, false},
			{"runplane-scheduler", []string{"list", "secrets", "-n", ns}, false},
			// The controller touches no Secret anywhere (test/e2e/rbac checks every escalation path).
			{"runplane-controller", []string{"get", "secret/" + api.NATSCredentialsSecret, "-n", "team-a"}, false},
			{"runplane-controller", []string{"update", "secret/" + api.NATSCredentialsSecret, "-n", "team-a"}, false},
			{"runplane-controller", []string{"get", "secret/ssh-keys", "-n", "team-a"}, false},
			{"runplane-controller", []string{"get", "secret/runplane-webhook-tls", "-n", ns}, false},
			{"runplane-controller", []string{"create", "secrets", "-n", "team-a"}, false},
			{"runplane-queue", []string{"create", "tokenreviews.authentication.k8s.io"}, true},
			{"runplane-queue", []string{"get", "pods", "-n", "team-a"}, true},
			{"runplane-queue", []string{"get", "replicasets.apps", "-n", "team-a"}, true},
			{"runplane-queue", []string{"update", "replicasets.apps", "-n", "team-a"}, false},
			// The queue reads (or first creates) the NATS trust Secret and, for the default
			// three servers, their route password, and no other.
			{"runplane-queue", []string{"get", "secret/runplane-nats-trust", "-n", ns}, true},
			{"runplane-queue", []string{"get", "secret/runplane-nats-route", "-n", ns}, true},
			{"runplane-queue", []string{"update", "secret/runplane-nats-route", "-n", ns}, false},
			{"runplane-queue", []string{"get", "secret/runplane-webhook-tls", "-n", ns}, false},
			{"runplane-queue", []string{"update", "secret/runplane-nats-trust", "-n", ns}, false},
			{"runplane-queue", []string{"delete", "secret/runplane-nats-trust", "-n", ns}, false},
			{"runplane-queue", []string{"create", "secrets", "-n", "team-a"}, false},
			// The webhook keeps its own TLS Secret only.
			{"runplane-webhook", []string{"get", "secret/runplane-webhook-tls", "-n", ns}, true},
			{"runplane-webhook", []string{"get", "secret/runplane-nats-trust", "-n", ns}, false},
			{"runplane-webhook", []string{"update", "mutatingwebhookconfigurations/runplane-webhook"}, true},
			{"runplane-webhook", []string{"update", "mutatingwebhookconfigurations/another"}, false},
			{"runplane-webhook", []string{"create", "mutatingwebhookconfigurations"}, false},
			{"runplane-webhook", []string{"create", "pods", "-n", "team-a"}, false},
			// The queue scales pool Deployments, nothing more.
			{"runplane-queue", []string{"update", "deployments", "--subresource=scale", "-n", "team-a"}, true},
			{"runplane-queue", []string{"update", "deployments", "-n", "team-a"}, false},
			{"runplane-queue", []string{"delete", "pods", "-n", "team-a"}, false},
			{"runplane-queue", []string{"update", "leases/runplane-queue-activator", "-n", ns}, true},
			{"runplane-queue", []string{"update", "leases/runplane-controller", "-n", ns}, false},
			// The scheduler binds and claims placeholders.
			{"runplane-scheduler", []string{"create", "pods", "--subresource=binding", "-n", "team-a"}, true},
			{"runplane-scheduler", []string{"delete", "pods", "-n", "team-a"}, true},
			{"runplane-scheduler", []string{"update", "leases/runplane-scheduler", "-n", ns}, true},
			// The extender follows the scheduler Lease; it holds none of its own.
			{"runplane-scheduler", []string{"update", "leases/runplane-extender", "-n", ns}, false},
			{"runplane-scheduler", []string{"get", "configmap/runplane-gpu-specs", "-n", ns}, true},
			{"runplane-scheduler", []string{"create", "deployments", "-n", "team-a"}, false},
			// The controller works on users' objects.
			{"runplane-controller", []string{"create", "jobs", "-n", "team-a"}, true},
			{"runplane-controller", []string{"create", "networkpolicies", "-n", "team-a"}, true},
			{"runplane-controller", []string{"patch", "pods", "-n", "team-a"}, true},
			{"runplane-controller", []string{"delete", "pods", "-n", "team-a"}, false},
			{"runplane-controller", []string{"create", "clusterrolebindings"}, false},
		} {
			t.Run(c.who+" "+strings.Join(c.args, " "), func(t *testing.T) {
				out, _ := kubectl(t, append([]string{"auth", "can-i", "--as=" + sa(c.who)}, c.args...)...)
				got := strings.TrimSpace(out)
				want := map[bool]string{true: "yes", false: "no"}[c.want]
				assert.True(t, strings.HasPrefix(got, want), "kubectl auth can-i %s as %s: %q, want %s", strings.Join(c.args, " "), c.who, got, want)
			})
		}
	})

	t.Run("upgrade keeps generated credentials and the patched caBundle", func(t *testing.T) {
		// The webhook patches the caBundle at run time (no process runs
		// here, so the test plays its part); an upgrade must not reset it,
		// nor touch the NATS trust Secret the queue created at run time (the
		// test plays the queue's part too).
		ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
		m, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "runplane-webhook", metav1.GetOptions{})
		require.NoError(t, err)
		for i := range m.Webhooks {
			m.Webhooks[i].ClientConfig.CABundle = ca
		}
		_, err = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{})
		require.NoError(t, err)
		secret := func(name string) map[string][]byte {
			s, err := client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			return s.Data
		}
		_, err = client.CoreV1().Secrets(ns).Get(ctx, "runplane-nats-trust", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "the chart rendered runplane-nats-trust (key material in the render): %v", err)
		created, err := bootstrapsecret.Ensure(ctx, client, ns, "runplane-nats-trust", nil,
			bootstrapsecret.NATSTrust("/data/jwt", queue.WorkerExports(stream.Config{})), bootstrapsecret.TrustSecretKey, bootstrapsecret.TrustConfigKey)
		require.NoError(t, err)

		mustRun(t, "helm", "upgrade", "runplane", ".", "--namespace", ns,
			"--values", "testdata/values-install.yaml", "--set", "queue.replicas=3", "--timeout", "2m")

		m, err = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "runplane-webhook", metav1.GetOptions{})
		require.NoError(t, err)
		for _, w := range m.Webhooks {
			assert.Equal(t, string(ca), string(w.ClientConfig.CABundle), "webhook %s: caBundle %q after upgrade, want the patched one", w.Name, w.ClientConfig.CABundle)
		}
		assert.Equal(t, created, secret("runplane-nats-trust"), "the upgrade changed the NATS trust Secret: the queue and NATS would no longer trust each other")
		dep, err := client.AppsV1().Deployments(ns).Get(ctx, "runplane-queue", metav1.GetOptions{})
		require.NoError(t, err)
		assert.EqualValues(t, 3, *dep.Spec.Replicas, "queue replicas %d after upgrade, want 3", *dep.Spec.Replicas)
	})

	t.Run("uninstall", func(t *testing.T) {
		// No --wait: it waited for the release's Pods to terminate (8 s),
		// which the checks below do not look at.
		mustRun(t, "helm", "uninstall", "runplane", "--namespace", ns, "--timeout", "2m")
		_, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "runplane-webhook", metav1.GetOptions{})
		assert.Error(t, err, "the MutatingWebhookConfiguration outlived the release")
		// With runplane gone, labelled Pods are admitted again (once the
		// API server's webhook configuration cache has seen the deletion).
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gpu", Labels: map[string]string{api.LabelGPUSpec: "g1.1"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
		assert.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err := client.CoreV1().Pods("team-a").Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			assert.NoError(c, err, "a labelled Pod is refused after uninstall")
		}, 30*time.Second, 100*time.Millisecond)
	})
}
