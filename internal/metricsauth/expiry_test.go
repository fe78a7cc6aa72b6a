package metricsauth

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"
)

func TestMetricsCertificateExpiryGauge(t *testing.T) {
	k, err := DevCert("ns", "queue").Keeper(fake.NewSimpleClientset(), nil)
	require.NoError(t, err)
	g := ExpiryGauge(k)
	require.Zero(t, testutil.ToFloat64(g), "nothing served yet")

	require.NoError(t, k.Init(context.Background()))
	require.True(t, k.NotAfter().After(time.Now()))
	require.Equal(t, float64(k.NotAfter().Unix()), testutil.ToFloat64(g))
	n, err := testutil.GatherAndCount(registryWith(g), "runplane_metrics_certificate_expiry_timestamp_seconds")
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func registryWith(c prometheus.Collector) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(c)
	return r
}
