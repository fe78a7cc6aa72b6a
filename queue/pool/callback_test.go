package pool

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
)

// TestPolicyCallbackURL: runplane.io/callback-url of the Deployment is the
// pool's default completion callback.
func TestPolicyCallbackURL(t *testing.T) {
	p, err := ParsePolicy(map[string]string{api.AnnotationCallbackURL: "https://hooks.example.com/done"}, nil)
	require.NoError(t, err)
	assert.Equal(t, "https://hooks.example.com/done", p.CallbackURL)
	p, err = ParsePolicy(nil, nil)
	require.NoError(t, err)
	assert.Empty(t, p.CallbackURL)
}
