package ingress

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBodyBudget: a namespace holds at most its share, the replica at
// most its budget; a release (called twice: once) gives back exactly what
// was taken, and an idle namespace is forgotten.
func TestBodyBudget(t *testing.T) {
	b := newBodyBudget(10, 6, 0)
	ra1, why := b.acquire("a", 4)
	require.Empty(t, why)
	_, why = b.acquire("a", 3)
	assert.Equal(t, ReasonNamespaceBodyBytes, why, "a holds 4 of its 6")
	rb, why := b.acquire("b", 6)
	require.Empty(t, why, "b's share is its own")
	_, why = b.acquire("c", 1)
	assert.Equal(t, ReasonReplicaBodyBytes, why, "the replica holds 10 of 10")
	_, why = b.acquire("a", 1)
	assert.Equal(t, ReasonReplicaBodyBytes, why)
	assert.Len(t, b.ns, 2, "a refused namespace holds nothing: c is not kept")

	ra1()
	ra1()
	rc, why := b.acquire("c", 4)
	require.Empty(t, why, "a's 4 came back, once")
	_, why = b.acquire("c", 1)
	assert.Equal(t, ReasonReplicaBodyBytes, why)
	rb()
	rc()
	assert.Empty(t, b.ns, "idle namespaces are forgotten")

	unbounded := newBodyBudget(0, 0, 0)
	r, why := unbounded.acquire("a", 1<<40)
	require.Empty(t, why)
	r()
}

// TestBodyBytes: a request is counted at its Content-Length, at the limit
// when it gives more (it is refused at the limit), and at first at
// unknownLengthStep (within the limit) when it gives none.
func TestBodyBytes(t *testing.T) {
	for _, c := range []struct {
		contentLength, want int64
	}{{100, 100}, {0, 0}, {-1, 1000}, {5000, 1000}} {
		assert.Equal(t, c.want, bodyBytes(&http.Request{ContentLength: c.contentLength}, 1000), "Content-Length %d", c.contentLength)
	}
	assert.Equal(t, int64(unknownLengthStep), bodyBytes(&http.Request{ContentLength: -1}, 64<<20), "no Content-Length, a large limit")
}
