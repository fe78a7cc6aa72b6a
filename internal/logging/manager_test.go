package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestManagerReleaseAtStop: the manager's report of its own Lease release
// at shutdown is INFO; any other error, that one's message with another
// error included, stays ERROR, with its attributes.
func TestManagerReleaseAtStop(t *testing.T) {
	var b bytes.Buffer
	l, err := New(&b, Options{})
	require.NoError(t, err)
	m := Manager(l).WithValues("component", "queue")
	m.Error(errors.New("leader election lost"), "error received after stop sequence was engaged")
	m.Error(errors.New("boom"), "error received after stop sequence was engaged")
	m.Error(errors.New("leader election lost"), "problem running manager")
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		recs = append(recs, r)
	}
	require.Len(t, recs, 3)
	assert.Equal(t, "INFO", recs[0]["level"])
	assert.Equal(t, "leader election Lease released at shutdown", recs[0]["msg"])
	assert.Equal(t, "queue", recs[0]["component"])
	assert.Equal(t, "ERROR", recs[1]["level"])
	assert.Equal(t, "boom", recs[1]["err"])
	assert.Equal(t, "ERROR", recs[2]["level"])
}
