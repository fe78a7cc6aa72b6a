package pool

import (
	"strings"
	"testing"
	"time"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/poolpolicy"

	"github.com/stretchr/testify/require"
)

func TestParsePolicy(t *testing.T) {
	tests := []struct {
		name    string
		ann     map[string]string
		podAnn  map[string]string
		want    Policy
		wantErr string
	}{
		{name: "defaults", want: DefaultPolicy()},
		{name: "all set", ann: map[string]string{api.AnnotationMinAvailable: "1", api.AnnotationMaxReplicas: "5", api.AnnotationIdleTimeout: "2m",
			api.AnnotationMinRequestCount: "3", api.AnnotationStartupTimeout: "90"}, podAnn: map[string]string{api.AnnotationConcurrency: "4"},
			want: Policy{MinAvailable: 1, MaxReplicas: 5, IdleTimeout: 2 * time.Minute, MinRequestCount: 3, StartupTimeout: 90 * time.Second, Concurrency: 4}},
		{name: "retry policy", podAnn: map[string]string{api.AnnotationMaxRetries: "2", api.AnnotationRetryOn: "error,503", api.AnnotationTimeoutSeconds: "60"},
			want: func() Policy {
				p := DefaultPolicy()
				p.TimeoutSeconds, p.Retry = 60, poolpolicy.Retry{MaxRetries: 2, On: []string{"error", "503"}, Backoff: poolpolicy.DefaultBackoff}
				return p
			}()},
		{name: "bad retry-on", podAnn: map[string]string{api.AnnotationMaxRetries: "2", api.AnnotationRetryOn: "sometimes"}, wantErr: api.AnnotationRetryOn},
		{name: "bad int", ann: map[string]string{api.AnnotationMinAvailable: "x"}, wantErr: api.AnnotationMinAvailable},
		{name: "negative", ann: map[string]string{api.AnnotationMinAvailable: "-1"}, wantErr: ">= 0"},
		{name: "zero max", ann: map[string]string{api.AnnotationMaxReplicas: "0"}, wantErr: api.AnnotationMaxReplicas},
		{name: "bad duration", ann: map[string]string{api.AnnotationIdleTimeout: "soon"}, wantErr: api.AnnotationIdleTimeout},
		{name: "bad concurrency", podAnn: map[string]string{api.AnnotationConcurrency: "0"}, wantErr: api.AnnotationConcurrency},
		{name: "limits", ann: map[string]string{api.AnnotationMaxBacklog: "50", api.AnnotationMaxInFlight: "4"},
			want: func() Policy { p := DefaultPolicy(); p.MaxBacklog, p.MaxInFlight = 50, 4; return p }()},
		{name: "bad max-backlog", ann: map[string]string{api.AnnotationMaxBacklog: "lots"}, wantErr: api.AnnotationMaxBacklog},
		{name: "zero max-in-flight", ann: map[string]string{api.AnnotationMaxInFlight: "0"}, wantErr: api.AnnotationMaxInFlight},
		{name: "floor above max", ann: map[string]string{api.AnnotationMinAvailable: "3", api.AnnotationMaxReplicas: "2"}, wantErr: "exceeds"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePolicy(tc.ann, tc.podAnn)
			if tc.wantErr != "" {
				require.False(t, err == nil || !strings.Contains(err.Error(), tc.wantErr), "err %v, want one containing %q", err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestLimits(t *testing.T) {
	def := Limits{}.WithDefaults()
	require.Equal(t, Limits{PoolMaxBacklog: DefaultPoolMaxBacklog, NamespaceMaxBacklog: DefaultNamespaceMaxBacklog, NamespaceMaxInFlight: DefaultNamespaceMaxInFlight,
		NamespaceMaxStreams: DefaultNamespaceMaxStreams, NamespaceMaxStreamBytes: DefaultNamespaceMaxStreamBytes, NamespaceMaxRecordBytes: DefaultNamespaceMaxRecordBytes,
		ReplicaMaxBodyBytes: DefaultReplicaMaxBodyBytes, NamespaceMaxBodyBytes: DefaultNamespaceMaxBodyBytes}, def)
	unbounded := Limits{PoolMaxBacklog: -1, PoolMaxInFlight: -1, NamespaceMaxBacklog: -1, NamespaceMaxInFlight: -1, NamespaceMaxStreams: -1,
		NamespaceMaxStreamBytes: -1, NamespaceMaxRecordBytes: -1, ReplicaMaxBodyBytes: -1, NamespaceMaxBodyBytes: -1}.WithDefaults()
	require.Equal(t, Limits{}, unbounded, "negative: unbounded (0)")
	own := DefaultPolicy()
	own.MaxBacklog, own.MaxInFlight = 7, 3
	require.Equal(t, 7, def.Backlog(own))
	require.Equal(t, 3, def.InFlight(own))
	require.Equal(t, DefaultPoolMaxBacklog, def.Backlog(DefaultPolicy()))
	require.Equal(t, 0, def.InFlight(DefaultPolicy()), "no pool in-flight bound by default")
}
