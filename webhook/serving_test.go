package webhook

import (
	"context"
	"encoding/pem"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/runplane/runplane/internal/pki"
	"github.com/runplane/runplane/webhook/config"
)

// TestCertKeeperRenews walks the self-managed certificate on a fake clock
// against a fake API: a renewal is trusted by both configurations before it
// is served, and a drifted caBundle is put back.
func TestCertKeeperRenews(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	client := fake.NewClientset()
	cfg := Config{Certs: pki.Options{CertValidity: 30 * 24 * time.Hour, RenewBefore: 10 * 24 * time.Hour, Clock: clk}}
	cfg.Namespace, cfg.TLS = "rp", config.TLS{SecretName: "tls", IPAddresses: []string{"127.0.0.1"}}
	cfg.Webhooks = config.Webhooks{Name: "rp-webhook", Manage: true, URL: "https://127.0.0.1:9443"}
	var ready atomic.Bool
	get, runnables, err := serving(ctx, client, nil, cfg, NewMetrics(), slog.New(slog.DiscardHandler), &ready)
	require.NoError(t, err)
	require.Len(t, runnables, 2)
	k := runnables[0].(*pki.Keeper)
	configs := runnables[1].(*configReconciler)
	caBundles := func() [][]byte {
		m, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "rp-webhook", metav1.GetOptions{})
		require.NoError(t, err)
		v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "rp-webhook", metav1.GetOptions{})
		require.NoError(t, err)
		out := [][]byte{v.Webhooks[0].ClientConfig.CABundle}
		for _, w := range m.Webhooks {
			out = append(out, w.ClientConfig.CABundle)
		}
		return out
	}
	trusted := func(b []byte) {
		t.Helper()
		for _, got := range caBundles() {
			require.Equal(t, b, got)
		}
	}

	require.NoError(t, configs.reconcile(ctx))
	require.True(t, ready.Load())
	first, err := get(nil)
	require.NoError(t, err)
	trusted(k.CABundle())

	// Not due: nothing changes.
	clk.SetTime(clk.Now().Add(19 * 24 * time.Hour))
	require.NoError(t, k.Renew(ctx))
	same, err := get(nil)
	require.NoError(t, err)
	require.Same(t, first, same)

	// Inside RenewBefore: a new certificate, served and trusted.
	clk.SetTime(clk.Now().Add(2 * 24 * time.Hour))
	require.NoError(t, k.Renew(ctx))
	renewed, err := get(nil)
	require.NoError(t, err)
	require.NotEqual(t, first.Certificate[0], renewed.Certificate[0])
	sec, err := client.CoreV1().Secrets("rp").Get(ctx, "tls", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, renewed.Certificate[0], mustLeafDER(t, sec.Data["tls.crt"]))
	trusted(k.CABundle())

	// Drift: another caBundle is put back.
	m, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "rp-webhook", metav1.GetOptions{})
	require.NoError(t, err)
	m.Webhooks[0].ClientConfig.CABundle = []byte("other")
	_, err = client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, m, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, configs.reconcile(ctx))
	trusted(k.CABundle())
}

// mustLeafDER is the first certificate of a PEM chain, in DER.
func mustLeafDER(t *testing.T, chain []byte) []byte {
	t.Helper()
	block, _ := pem.Decode(chain)
	require.NotNil(t, block, "no PEM certificate")
	return block.Bytes
}
