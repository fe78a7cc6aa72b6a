package pki

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

func verify(t *testing.T, b *Bundle, name string, at time.Time) {
	t.Helper()
	verifyWith(t, b.CABundle, b, name, at)
	_, err := b.TLSCertificate()
	require.NoError(t, err)
}

// verifyWith checks the served chain (the leaf and what follows it in
// CertPEM) as a TLS client trusting trust does.
func verifyWith(t *testing.T, trust []byte, b *Bundle, name string, at time.Time) {
	t.Helper()
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(trust), "CA bundle holds no certificate")
	block, rest := pem.Decode(b.CertPEM)
	require.NotNil(t, block)
	leaf, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	inter := x509.NewCertPool()
	inter.AppendCertsFromPEM(rest)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: name, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.NoError(t, err, "serving certificate does not verify for %s at %s", name, at)
}

func countCerts(p []byte) int {
	n := 0
	for {
		var block *pem.Block
		if block, p = pem.Decode(p); block == nil {
			return n
		}
		n++
	}
}

// TestRenew walks one bundle through its life on a fake clock: each step
// moves the clock (and maybe the names) and says what must be renewed.
func TestRenew(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	o := Options{
		DNSNames: []string{"runplane-webhook.runplane-system.svc"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		CAValidity: 300 * 24 * time.Hour, CertValidity: 30 * 24 * time.Hour, RenewBefore: 10 * 24 * time.Hour,
		Clock: clk,
	}
	first, err := Renew(nil, o)
	require.NoError(t, err)
	verify(t, first, o.DNSNames[0], start)
	require.Equal(t, start.Add(o.CertValidity).Truncate(time.Second), first.NotAfter)

	steps := []struct {
		name      string
		advance   time.Duration
		dnsNames  []string
		newCA     bool
		newLeaf   bool
		bundleCAs int
		cross     bool // the leaf is served with the new CA certified by the old one
	}{
		{name: "loaded again (a restart)", bundleCAs: 1},
		{name: "an hour before RenewBefore", advance: o.CertValidity - o.RenewBefore - time.Hour, bundleCAs: 1},
		{name: "an hour into RenewBefore", advance: 2 * time.Hour, newLeaf: true, bundleCAs: 1},
		{name: "a new name to cover", dnsNames: []string{o.DNSNames[0], "other.example"}, newLeaf: true, bundleCAs: 1},
		// The bundle trusts both CAs, so clients holding either work; a
		// client holding the old bundle (the old CA alone) verifies the new
		// leaf through the cross certificate served with it.
		{name: "the CA in its last third", advance: o.CAValidity * 2 / 3, newCA: true, newLeaf: true, bundleCAs: 2, cross: true},
		{name: "a leaf renewed while the old CA lives", advance: o.CertValidity - o.RenewBefore + time.Hour, newLeaf: true, bundleCAs: 2, cross: true},
		{name: "the old CA expired", advance: o.CAValidity / 2, newLeaf: true, bundleCAs: 1},
	}
	cur := FromSecretData(first.secretData())
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			clk.SetTime(clk.Now().Add(s.advance))
			if s.dnsNames != nil {
				o.DNSNames = s.dnsNames
			}
			next, err := Renew(cur, o)
			require.NoError(t, err)
			if !s.newCA && !s.newLeaf {
				require.Same(t, cur, next, "a good bundle was renewed")
			}
			require.Equal(t, s.newCA, string(next.CACert) != string(cur.CACert), "CA renewed")
			require.Equal(t, s.newLeaf, string(next.CertPEM) != string(cur.CertPEM), "serving certificate renewed")
			require.Equal(t, s.bundleCAs, countCerts(next.CABundle), "CAs in the bundle")
			require.Equal(t, s.cross, len(next.CrossCert) > 0, "cross certificate")
			leaf, err := ParseCert(next.CertPEM)
			require.NoError(t, err)
			require.Equal(t, leaf.NotAfter, next.NotAfter, "NotAfter of the bundle")
			for _, n := range o.DNSNames {
				verify(t, next, n, clk.Now())
				// A client that took the bundle a step earlier still
				// verifies what is served now.
				verifyWith(t, cur.CABundle, next, n, clk.Now())
			}
			cur = FromSecretData(next.secretData())
		})
	}
}

// TestRenewClientAuth: a certificate that must also authenticate as a
// client (a NATS server's routes) gets both usages; one issued without is
// renewed.
func TestRenewClientAuth(t *testing.T) {
	o := Options{DNSNames: []string{"a.b.svc"}}
	b, err := Renew(nil, o)
	require.NoError(t, err)
	o.ClientAuth = true
	next, err := Renew(b, o)
	require.NoError(t, err)
	require.NotSame(t, b, next, "a serving-only certificate kept for client authentication")
	leaf, err := ParseCert(next.CertPEM)
	require.NoError(t, err)
	require.ElementsMatch(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, leaf.ExtKeyUsage)
	again, err := Renew(next, o)
	require.NoError(t, err)
	require.Same(t, next, again)
}

// TestRenewNewExpiry: a certificate renewed within the second it was
// issued in still expires at another second (servers are told apart by
// their certificate's expiry).
func TestRenewNewExpiry(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	o := Options{DNSNames: []string{"a.b.svc"}, Clock: clk}
	first, err := Renew(nil, o)
	require.NoError(t, err)
	o.RenewBefore = 2 * o.withDefaults().CertValidity // due at once
	next, err := Renew(FromSecretData(first.secretData()), o)
	require.NoError(t, err)
	require.NotEqual(t, string(first.CertPEM), string(next.CertPEM))
	require.NotEqual(t, first.NotAfter, next.NotAfter)
}

func TestRenewGarbage(t *testing.T) {
	b, err := Renew(&Bundle{CertPEM: []byte("junk"), KeyPEM: []byte("junk"), CACert: []byte("junk"), CAKey: []byte("junk")}, Options{DNSNames: []string{"a.b.svc"}})
	require.NoError(t, err)
	verify(t, b, "a.b.svc", time.Now())
}

// TestEnsureLosingTheCreateRace: two replicas find the Secret missing and
// both create it; the one whose create loses uses the winner's certificate
// instead of failing (a failure restarts the queue at start). The fake
// clientset stands in for the order only a race produces: the Secret is
// absent at the read and present at the create.
func TestEnsureLosingTheCreateRace(t *testing.T) {
	ref := SecretRef{Namespace: "rp", Name: "nats-tls"}
	o := Options{DNSNames: []string{"nats"}}
	winner, err := Renew(nil, o)
	require.NoError(t, err)
	won := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: ref.Name, Namespace: ref.Namespace}, Type: corev1.SecretTypeTLS, Data: winner.secretData()}
	client := fake.NewClientset(won)
	reads := 0
	client.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if reads++; reads == 1 { // read before the other replica created it
			return true, nil, apierrors.NewNotFound(corev1.Resource("secrets"), ref.Name)
		}
		return false, nil, nil
	})
	b, wrote, err := Ensure(context.Background(), client, ref, o)
	require.NoError(t, err)
	assert.False(t, wrote)
	assert.Equal(t, winner.CertPEM, b.CertPEM, "the winner's certificate")
}
