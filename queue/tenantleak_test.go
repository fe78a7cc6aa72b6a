package queue_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/queue"
)

// TestConflictRevealsNoOtherPool (issue #30 item 5): a caller allowed on
// one pool re-posted an invocation ID that exists in another pool of the
// namespace and read that pool's name in the 409 ("already belongs to
// pool \"other\""). The 409 is now word for word the one an ID held by
// the namespace's predecessor gets: the ID is taken, nothing more.
func TestConflictRevealsNoOtherPool(t *testing.T) {
	nss := &incarnations{cached: "uid-1", current: "uid-1"}
	e := newEnv(t, func(c *queue.Config) { c.Namespaces = nss })
	require.Equal(t, 202, e.invoke(map[string]any{"mode": "async", "invocationID": "gone"}).code)
	nss.set("uid-2", "uid-2") // deleted, made again: "gone" is its predecessor's
	theirs := e.do("POST", "/v1/namespaces/default/pools/other/invocations", map[string]any{"mode": "async", "invocationID": "theirs", "payload": "secret"})
	require.Equal(t, 202, theirs.code, "%s", theirs.raw)

	predecessor := e.invoke(map[string]any{"mode": "async", "invocationID": "gone"})
	require.Equal(t, 409, predecessor.code, "%s", predecessor.raw)
	for _, mode := range []string{"async", "sync"} {
		foreign := e.invoke(map[string]any{"mode": mode, "invocationID": "theirs"})
		require.Equal(t, 409, foreign.code, "%s", foreign.raw)
		detail := fmt.Sprint(foreign.body["detail"])
		assert.NotContains(t, detail, `"other"`, "the other pool's name")
		assert.Equal(t, strings.ReplaceAll(fmt.Sprint(predecessor.body["detail"]), "gone", "theirs"), detail)
		assert.NotContains(t, string(foreign.raw), "secret")
	}
}
