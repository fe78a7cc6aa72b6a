package pki

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
)

func verify(t *testing.T, b *Bundle, name string, at time.Time) {
	t.Helper()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(b.CABundle), "CA bundle holds no certificate")
	leaf, err := ParseCert(b.CertPEM)
	require.NoError(t, err)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.NoError(t, err, "serving certificate does not verify for %s at %s", name, at)
	_, err = b.TLSCertificate()
	require.NoError(t, err)
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
	}{
		{name: "loaded again (a restart)", bundleCAs: 1},
		{name: "an hour before RenewBefore", advance: o.CertValidity - o.RenewBefore - time.Hour, bundleCAs: 1},
		{name: "an hour into RenewBefore", advance: 2 * time.Hour, newLeaf: true, bundleCAs: 1},
		{name: "a new name to cover", dnsNames: []string{o.DNSNames[0], "other.example"}, newLeaf: true, bundleCAs: 1},
		// The bundle trusts both CAs, so clients holding either work.
		{name: "the CA in its last third", advance: o.CAValidity * 2 / 3, newCA: true, newLeaf: true, bundleCAs: 2},
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
			for _, n := range o.DNSNames {
				verify(t, next, n, clk.Now())
			}
			cur = next
		})
	}
}

func TestRenewGarbage(t *testing.T) {
	b, err := Renew(&Bundle{CertPEM: []byte("junk"), KeyPEM: []byte("junk"), CACert: []byte("junk"), CAKey: []byte("junk")}, Options{DNSNames: []string{"a.b.svc"}})
	require.NoError(t, err)
	verify(t, b, "a.b.svc", time.Now())
}
