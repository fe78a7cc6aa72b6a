package refusal

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestError(t *testing.T) {
	err := fmt.Errorf("checking: %w", New(http.StatusForbidden, "not_worker", "pod %s: %w", "a/b", context.Canceled))
	r, ok := errors.AsType[*Error](err)
	assert.True(t, ok)
	assert.Equal(t, http.StatusForbidden, r.Status)
	assert.Equal(t, "not_worker", r.Reason)
	assert.Equal(t, "pod a/b: context canceled", r.Error())
	assert.ErrorIs(t, err, context.Canceled, "the cause stays in the chain")
}
