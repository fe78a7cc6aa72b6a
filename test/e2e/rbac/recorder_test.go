package rbac_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/test/e2e/rbac"
)

// TestRecorderSeesDenials: the impersonating config really acts as the
// ServiceAccount, and the Recorder catches a 403 (so the component tests'
// "no denial" checks can fail). It also pins that the controller lists no
// Secret at all, by name or otherwise: no NATS credential is copied into
// tenant namespaces any more.
func TestRecorderSeesDenials(t *testing.T) {
	install(t)
	managed := api.LabelManagedBy + "=" + api.ManagedByController
	for _, c := range []struct {
		name, sa, namespace string
		opts                metav1.ListOptions
		allowed             bool
	}{
		{"queue lists Secrets", "runplane-queue", "", metav1.ListOptions{}, false},
		{"controller lists every Secret", "runplane-controller", "", metav1.ListOptions{}, false},
		{"controller lists Secrets by label (the old cache)", "runplane-controller", "", metav1.ListOptions{LabelSelector: managed}, false},
		{"controller lists the former NATS credentials by name", "runplane-controller", "",
			metav1.ListOptions{LabelSelector: managed, FieldSelector: "metadata.name=" + api.NATSCredentialsSecret}, false},
		{"controller lists another Secret by name", "runplane-controller", "", metav1.ListOptions{FieldSelector: "metadata.name=runplane-webhook-tls"}, false},
		{"queue lists the NATS trust Secret by name", "runplane-queue", releaseNS,
			metav1.ListOptions{FieldSelector: "metadata.name=runplane-nats-trust"}, false},
		{"webhook lists Secrets in its namespace", "runplane-webhook", releaseNS, metav1.ListOptions{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := &rbac.Recorder{}
			client, err := kubernetes.NewForConfig(rec.As(env.RESTConfig(), releaseNS, c.sa))
			require.NoError(t, err)
			_, err = client.CoreV1().Secrets(c.namespace).List(t.Context(), c.opts)
			denied := rec.Denied()
			if c.allowed {
				require.NoError(t, err, "refused")
				require.Empty(t, denied, "recorded denials for an allowed call")
				return
			}
			require.True(t, apierrors.IsForbidden(err), "want Forbidden, got %v", err)
			require.Len(t, denied, 1, "one recorded denial")
			require.Contains(t, denied[0], rbac.ServiceAccountUser(releaseNS, c.sa), "the denial names the ServiceAccount")
		})
	}
}

// TestRecorderLogLines: log lines that mention forbidden count as denials,
// whatever their case and however they are split across writes.
func TestRecorderLogLines(t *testing.T) {
	for _, c := range []struct {
		name   string
		writes []string
		want   int
	}{
		{"clean", []string{"level=INFO msg=started\n"}, 0},
		{"one line", []string{"level=ERROR msg=\"secrets is Forbidden: User ...\"\n"}, 1},
		{"split across writes", []string{"level=ERROR msg=\"leases is forb", "idden\"\nlevel=INFO msg=ok\n"}, 1},
		{"unterminated line not yet counted", []string{"forbidden"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := &rbac.Recorder{}
			for _, w := range c.writes {
				_, err := rec.Write([]byte(w))
				require.NoError(t, err)
			}
			assert.Len(t, rec.Denied(), c.want, "denials")
			assert.Equal(t, strings.Join(c.writes, ""), rec.Log())
		})
	}
}

func TestRBACTerm(t *testing.T) {
	for _, c := range []struct{ method, url, want string }{
		{"GET", "/api/v1/secrets?fieldSelector=metadata.name%3Dx&limit=500", "list secrets"},
		{"GET", "/api/v1/secrets?watch=true", "watch secrets"},
		{"GET", "/api/v1/namespaces/a/secrets/x", "get secrets"},
		{"GET", "/api/v1/namespaces/a", "get namespaces"},
		{"GET", "/api/v1/namespaces", "list namespaces"},
		{"POST", "/api/v1/namespaces/a/pods/p/binding", "create pods/binding"},
		{"PUT", "/apis/apps/v1/namespaces/a/deployments/d/scale", "update apps/deployments/scale"},
		{"PATCH", "/api/v1/namespaces/a/pods/p", "patch pods"},
		{"DELETE", "/api/v1/namespaces/a/pods/p", "delete pods"},
		{"DELETE", "/api/v1/namespaces/a/pods", "deletecollection pods"},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/s/leases/l", "update coordination.k8s.io/leases"},
		{"PUT", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/w", "update admissionregistration.k8s.io/mutatingwebhookconfigurations"},
		{"GET", "/apis", "GET /apis"},
		{"GET", "/version", "GET /version"},
	} {
		u, err := url.Parse(c.url)
		require.NoError(t, err)
		assert.Equal(t, c.want, rbac.RBACTerm(c.method, u), "%s %s", c.method, c.url)
	}
}
