package pool

import (
	"strings"
	"testing"
	"time"

	"github.com/runplane/runplane/api"

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
		{name: "bad int", ann: map[string]string{api.AnnotationMinAvailable: "x"}, wantErr: api.AnnotationMinAvailable},
		{name: "negative", ann: map[string]string{api.AnnotationMinAvailable: "-1"}, wantErr: ">= 0"},
		{name: "zero max", ann: map[string]string{api.AnnotationMaxReplicas: "0"}, wantErr: api.AnnotationMaxReplicas},
		{name: "bad duration", ann: map[string]string{api.AnnotationIdleTimeout: "soon"}, wantErr: api.AnnotationIdleTimeout},
		{name: "bad concurrency", podAnn: map[string]string{api.AnnotationConcurrency: "0"}, wantErr: api.AnnotationConcurrency},
		{name: "floor above max", ann: map[string]string{api.AnnotationMinAvailable: "3", api.AnnotationMaxReplicas: "2"}, wantErr: "exceeds"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePolicy(tc.ann, tc.podAnn)
			if tc.wantErr != "" {
				require.False(t, err == nil || !strings.Contains(err.Error(), tc.wantErr), "err %v, want one containing %q", err, tc.wantErr)
				return
			}
			require.False(t, err != nil || got != tc.want, "got %+v, %v; want %+v", got, err, tc.want)
		})
	}
}
