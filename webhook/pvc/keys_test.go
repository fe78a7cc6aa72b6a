package pvc

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
)

func TestValidateKeys(t *testing.T) {
	tests := []struct {
		name     string
		old, cur map[string]string
		runplane bool
		wantKey  string // "" admits
	}{
		{name: "a typo on create", cur: map[string]string{"runplane.io/prepare-from-imag": "busybox"}, wantKey: "runplane.io/prepare-from-imag"},
		{name: "a typo added later", old: map[string]string{}, cur: map[string]string{"runplane.io/acessor": "enabled"}, wantKey: "runplane.io/acessor"},
		{name: "other domains are not runplane's", cur: map[string]string{"example.com/x": "y"}},
		{name: "the user marks a claim prepared", cur: map[string]string{api.AnnotationPrepareFromImage: "b", api.AnnotationPreparePhase: api.PhaseSucceeded}, wantKey: api.AnnotationPreparePhase},
		{name: "the user rewrites the observed attempt", old: map[string]string{api.AnnotationPrepareObservedAttempt: "0"},
			cur: map[string]string{api.AnnotationPrepareObservedAttempt: "1"}, wantKey: api.AnnotationPrepareObservedAttempt},
		{name: "the user removes the phase", old: map[string]string{api.AnnotationPreparePhase: api.PhaseFailed}, cur: map[string]string{}, wantKey: api.AnnotationPreparePhase},
		{name: "runplane writes the phase", old: map[string]string{}, cur: map[string]string{api.AnnotationPreparePhase: api.PhaseRunning}, runplane: true},
		{name: "the user keeps what runplane wrote and bumps the attempt", old: map[string]string{api.AnnotationPreparePhase: api.PhaseFailed, api.AnnotationPrepareAttempt: "0"},
			cur: map[string]string{api.AnnotationPreparePhase: api.PhaseFailed, api.AnnotationPrepareAttempt: "1"}},
		{name: "an unknown key from before stays", old: map[string]string{"runplane.io/retired": "x"}, cur: map[string]string{"runplane.io/retired": "x", api.AnnotationPrepareAttempt: "1"}},
		{name: "an unknown key may be removed", old: map[string]string{"runplane.io/retired": "x"}, cur: map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateKeys(tt.old, tt.cur, tt.runplane)
			if tt.wantKey == "" {
				require.NoError(t, err)
				return
			}
			var ke *KeyError
			require.ErrorAs(t, err, &ke)
			assert.Equal(t, tt.wantKey, ke.Key)
		})
	}
	err := ValidateKeys(nil, map[string]string{"runplane.io/prepare-from-imag": "x"}, false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), api.AnnotationPrepareFromImage, "the denial lists the known keys")
}
