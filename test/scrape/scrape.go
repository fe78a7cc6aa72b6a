// Package scrape checks who may read a component's /metrics on the real API
// server of test/cluster: the scrapers every component's test uses, and the
// one check of what each of them gets.
package scrape

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

const (
	namespace = "runplane-scrapers"
	// ReaderRole is the chart's ClusterRole for scrapers, with its one rule.
	ReaderRole = "runplane-metrics-reader"
)

// Scrapers are tokens of two ServiceAccounts: Reader is bound to
// ReaderRole (get on the non-resource URL /metrics), Stranger to nothing.
type Scrapers struct {
	Reader, Stranger string
}

// Cluster is where the scrapers are made: a *cluster.Cluster, or make
// dev's cluster seen through its kubeconfig.
type Cluster interface {
	Client() kubernetes.Interface
}

// New makes the scrapers (again, if they exist) and waits until RBAC
// grants the reader: the filter caches a denial for 30 s.
func New(ctx context.Context, c Cluster) (Scrapers, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	k := c.Client()
	_, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return Scrapers{}, fmt.Errorf("scrape: namespace %s: %w", namespace, err)
	}
	for _, sa := range []string{"reader", "stranger"} {
		_, err := k.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return Scrapers{}, fmt.Errorf("scrape: ServiceAccount %s: %w", sa, err)
		}
	}
	_, err = k.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ReaderRole},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return Scrapers{}, fmt.Errorf("scrape: ClusterRole: %w", err)
	}
	_, err = k.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "runplane-scrapers-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ReaderRole},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "reader", Namespace: namespace}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return Scrapers{}, fmt.Errorf("scrape: ClusterRoleBinding: %w", err)
	}
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		sar, err := k.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:" + namespace + ":reader", NonResourceAttributes: &authzv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}}}, metav1.CreateOptions{})
		return err == nil && sar.Status.Allowed, nil
	})
	if err != nil {
		return Scrapers{}, fmt.Errorf("scrape: the reader's grant: %w", err)
	}
	var s Scrapers
	for sa, tok := range map[string]*string{"reader": &s.Reader, "stranger": &s.Stranger} {
		tr, err := k.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			return Scrapers{}, fmt.Errorf("scrape: token of %s: %w", sa, err)
		}
		*tok = tr.Status.Token
	}
	return s, nil
}

// Get reads url with token as its bearer token ("" none), over TLS without
// verifying the server (components serve metrics with a self-signed
// certificate; what is checked here is the scraper, not the server).
func Get(url, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see above
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Check requires url to answer no token with 401, a forged token with 401
// or 500 (controller-runtime's filter reports the TokenReview's "invalid
// bearer token" as an error), the stranger with 403, and the reader with
// 200 and a body containing want.
func (s Scrapers) Check(t testing.TB, url, want string) {
	t.Helper()
	// The barrier: the component's metrics listener is up (a manager starts
	// it among its runnables, a moment after the component reports ready).
	u, err := neturl.Parse(url)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", u.Host, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "%s never listened", u.Host)
	for _, c := range []struct {
		who, token string
		codes      []int
	}{
		{"anonymous", "", []int{http.StatusUnauthorized}},
		{"forged token", "not-a-token", []int{http.StatusUnauthorized, http.StatusInternalServerError}},
		{"a ServiceAccount without get on /metrics", s.Stranger, []int{http.StatusForbidden}},
		{"the reader", s.Reader, []int{http.StatusOK}},
	} {
		code, body, err := Get(url, c.token)
		require.NoError(t, err, "%s: GET %s", c.who, url)
		assert.Contains(t, c.codes, code, "%s: GET %s: %s", c.who, url, truncate(body))
		if code == http.StatusOK && c.codes[0] == http.StatusOK {
			assert.True(t, strings.Contains(body, want), "%s: GET %s: no %s in %s", c.who, url, want, truncate(body))
		} else {
			assert.False(t, strings.Contains(body, want), "%s: GET %s served the metrics", c.who, url)
		}
	}
}

// CheckClean is Check of a component's whole /metrics, and the reader's
// body parses as the Prometheus text format and passes promlint (the
// naming and help-text rules Prometheus's own tooling checks).
func (s Scrapers) CheckClean(t testing.TB, url string) {
	t.Helper()
	s.Check(t, url, "# TYPE ")
	code, body, err := Get(url, s.Reader)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "GET %s: %s", url, truncate(body))
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	require.NoError(t, err, "GET %s: not the Prometheus text format", url)
	assert.Empty(t, problems, "GET %s: promlint", url)
}

// CheckVerified requires url to serve, to the reader, 200 over TLS that
// verifies against caPEM for serverName: what a ServiceMonitor with that
// CA and serverName (and no insecureSkipVerify) gets.
func (s Scrapers) CheckVerified(t testing.TB, url, serverName string, caPEM []byte) {
	t.Helper()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM), "no certificate in the CA bundle")
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.Reader)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	require.NoError(t, err, "GET %s verifying %s", url, serverName)
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s verifying %s", url, serverName)
}

// Lines is the reader's /metrics at url, one line each (200 required).
func (s Scrapers) Lines(t testing.TB, url string) []string {
	t.Helper()
	code, body, err := Get(url, s.Reader)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "GET %s: %s", url, truncate(body))
	return strings.Split(body, "\n")
}

// NATSServers checks the queue's /metrics at url reports n NATS servers
// answering (internal/natsvarz: NATS is scraped through the queue), each
// with the expiry of the certificate its clients see.
func (s Scrapers) NATSServers(t testing.TB, url string, n int) {
	t.Helper()
	lines := s.Lines(t, url)
	want := fmt.Sprintf("runplane_nats_servers %d", n)
	assert.True(t, slices.Contains(lines, want), "GET %s: no line %q", url, want)
	certs := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "runplane_nats_certificate_expiry_timestamp_seconds{") && strings.Contains(l, `listener="client"`) {
			certs++
		}
	}
	assert.Equal(t, n, certs, "GET %s: the servers' client certificates", url)
}

func truncate(s string) string {
	if len(s) > 200 {
		return fmt.Sprintf("%s…(%d bytes)", s[:200], len(s))
	}
	return s
}
