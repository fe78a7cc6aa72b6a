package ingress

import (
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestDedup: a chunk number seen before within its attempt is dropped (a
// sidecar's publish retry stored it twice); a new attempt restarts.
func TestDedup(t *testing.T) {
	var d dedup
	for _, tc := range []struct {
		attempt, num       string
		restarted, dropped bool
	}{
		{"1", "1", false, false},
		{"1", "2", false, false},
		{"1", "2", false, true},
		{"1", "1", false, true},
		{"1", "3", false, false},
		{"2", "1", true, false},
		{"2", "1", false, true},
		{"2", "2", false, false},
	} {
		r, dup := d.next(tc.attempt, tc.num)
		assert.Equal(t, tc.restarted, r, "%+v", tc)
		assert.Equal(t, tc.dropped, dup, "%+v", tc)
	}
	// Resumed after chunk 5 of attempt 1: its copy is dropped, 6 is not.
	var r dedup
	r.seen("1", "5")
	_, dup := r.next("1", "5")
	assert.True(t, dup)
	_, dup = r.next("1", "6")
	assert.False(t, dup)
}

// TestStreamRequest: how a request asks for a stream and where it resumes.
func TestStreamRequest(t *testing.T) {
	r := httptest.NewRequest("POST", "/x", nil)
	assert.False(t, wantsStream(r, InvokeRequest{}))
	assert.True(t, wantsStream(r, InvokeRequest{Stream: true}))
	r.Header.Set("Accept", "application/json, text/event-stream;q=0.9")
	assert.True(t, wantsStream(r, InvokeRequest{}))

	g := httptest.NewRequest("GET", "/x/stream?after=7", nil)
	n, err := lastEventID(g)
	assert.NoError(t, err)
	assert.EqualValues(t, 7, n)
	g.Header.Set("Last-Event-ID", "42")
	n, err = lastEventID(g)
	assert.NoError(t, err)
	assert.EqualValues(t, 42, n, "the header wins")
	g.Header.Set("Last-Event-ID", "-1")
	_, err = lastEventID(g)
	assert.ErrorContains(t, err, "Last-Event-ID")
}
