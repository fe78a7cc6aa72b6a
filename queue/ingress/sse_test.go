package ingress

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/runplane/runplane/api/serverless/v1"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
)

// TestFollower: the chunks a stream's client gets, chunk by chunk (worker,
// attempt, execution, number), with the Record saying w1 holds attempt 1
// and w2 attempt 2.
func TestFollower(t *testing.T) {
	rec := messages.Record{Worker: "w2", Attempt: 2, Attempts: []messages.AttemptOutcome{{Attempt: 1, Worker: "w1"}}}
	type step struct {
		worker    string
		attempt   int
		execution string
		num       int
		deliver   bool
		events    []string
	}
	for _, tc := range []struct {
		name   string
		resume *chunkMeta // the chunk the client had (nil: a fresh stream)
		lost   bool       // resumed after a chunk no longer retained
		steps  []step
	}{
		{name: "in order, a retry's copy dropped", steps: []step{
			{"w1", 1, "a", 1, true, nil}, {"w1", 1, "a", 2, true, nil}, {"w1", 1, "a", 2, false, nil}, {"w1", 1, "a", 3, true, nil}}},
		{name: "a sibling's forged chunk is ignored", steps: []step{
			{"w1", 1, "a", 1, true, nil}, {"w2", 1, "x", 2, false, nil}, {"w3", 1, "a", 2, false, nil}, {"w1", 1, "a", 2, true, nil}}},
		{name: "a stale attempt's worker cannot speak for the current attempt", steps: []step{
			{"w2", 2, "b", 1, true, nil}, {"w1", 2, "a", 2, false, nil}, {"w1", 1, "a", 9, false, nil}, {"w2", 2, "b", 2, true, nil}}},
		{name: "a retry opens with attempt", steps: []step{
			{"w1", 1, "a", 1, true, nil}, {"w2", 2, "b", 1, true, []string{v1.EventAttempt}}, {"w1", 1, "a", 2, false, nil}}},
		{name: "a rerun of the same attempt is a restart, the first run's late chunks dropped", steps: []step{
			{"w1", 1, "a", 1, true, nil}, {"w1", 1, "a", 2, true, nil}, {"w1", 1, "b", 1, true, []string{v1.EventRestart}},
			{"w1", 1, "a", 3, false, nil}, {"w1", 1, "b", 2, true, nil}}},
		{name: "resumed after chunk 5: its copy dropped, a rerun's 1..5 are not", resume: &chunkMeta{worker: "w1", attempt: 1, execution: "a", num: 5}, steps: []step{
			{"w1", 1, "a", 5, false, nil}, {"w1", 1, "b", 1, true, []string{v1.EventRestart}}, {"w1", 1, "b", 2, true, nil}}},
		{name: "evicted chunks are a gap", resume: &chunkMeta{worker: "w1", attempt: 1, execution: "a", num: 2}, steps: []step{
			{"w1", 1, "a", 6, true, []string{v1.EventGap}}, {"w1", 1, "a", 7, true, nil}}},
		{name: "a late start whose first chunks are gone", steps: []step{
			{"w1", 1, "a", 4, true, []string{v1.EventGap}}, {"w1", 1, "a", 5, true, nil}}},
		{name: "resumed after a chunk no longer retained", lost: true, steps: []step{
			{"w1", 1, "a", 4, true, []string{v1.EventGap}}, {"w1", 1, "a", 5, true, nil}}},
		// The client's output was another run's: it is told to drop it.
		{name: "resumed after a lost chunk, then a fresh attempt from its first", lost: true, steps: []step{
			{"w2", 2, "b", 1, true, []string{v1.EventAttempt}}, {"w2", 2, "b", 2, true, nil}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &follower{known: !tc.lost}
			if tc.resume != nil {
				f.resumeFrom(*tc.resume)
			}
			for i, st := range tc.steps {
				deliver, events, _ := f.next(chunkMeta{seq: uint64(100 + i), worker: st.worker, attempt: st.attempt, execution: st.execution, num: st.num},
					owner(rec, st.attempt))
				var names []string
				for _, ev := range events {
					names = append(names, ev.name)
				}
				assert.Equal(t, st.deliver, deliver, "step %d %+v", i, st)
				assert.Equal(t, st.events, names, "step %d %+v", i, st)
			}
		})
	}
}

// TestResumable: which chunk a client resumes after says where it is.
func TestResumable(t *testing.T) {
	rec := messages.Record{Worker: "w3", Attempt: 3, Attempts: []messages.AttemptOutcome{{Attempt: 1, Worker: "w1"}}}
	for _, tc := range []struct {
		worker  string
		attempt int
		want    bool
	}{
		{"w3", 3, true},  // the current attempt's worker
		{"w1", 1, true},  // a listed earlier attempt's
		{"w2", 2, true},  // an earlier attempt whose worker was lost (not listed)
		{"w9", 1, false}, // not the worker of a listed attempt
		{"w9", 3, false}, // not the current attempt's worker
		{"w9", 4, false}, // an attempt that does not exist
	} {
		assert.Equal(t, tc.want, resumable(rec, chunkMeta{worker: tc.worker, attempt: tc.attempt}), "%+v", tc)
	}
	// Resumed after attempt 2's chunk: attempt 3's output is announced.
	f := &follower{}
	f.resumeFrom(chunkMeta{worker: "w2", attempt: 2, execution: "a", num: 4})
	deliver, events, _ := f.next(chunkMeta{worker: "w3", attempt: 3, execution: "b", num: 1}, owner(rec, 3))
	assert.True(t, deliver)
	assert.Equal(t, []sseEvent{{v1.EventAttempt, v1.StreamAttempt{Attempt: 3}}}, events)
}

// TestFollowerEnd: a streamed answer with more chunks than the client got
// ends with a gap before the result.
func TestFollowerEnd(t *testing.T) {
	final := func(chunks int) messages.Record {
		b, _ := json.Marshal(framework.StreamSummary{Chunks: chunks})
		return messages.Record{Attempt: 1, Worker: "w1", Response: &messages.Response{Headers: map[string]string{framework.StreamedHeader: "true"}, Body: b}}
	}
	f := &follower{known: true}
	_, ok := f.end(final(0))
	assert.False(t, ok, "nothing streamed")
	g, ok := f.end(final(3))
	assert.True(t, ok, "everything aged out before a late start")
	assert.Equal(t, 3, g.data.(v1.StreamGap).Missing)
	f.resumeFrom(chunkMeta{worker: "w1", attempt: 1, execution: "a", num: 3})
	_, ok = f.end(final(3))
	assert.False(t, ok, "the client has every chunk")
	_, ok = (&follower{known: true}).end(messages.Record{Response: &messages.Response{Body: []byte(`{"chunks":3}`)}})
	assert.False(t, ok, "not a streamed answer")
}

// TestStreamRequest: how a request asks for a stream and where it resumes.
func TestStreamRequest(t *testing.T) {
	r := httptest.NewRequest("POST", "/x", nil)
	assert.False(t, wantsStream(r, v1.InvokeRequest{}))
	assert.True(t, wantsStream(r, v1.InvokeRequest{Stream: true}))
	r.Header.Set("Accept", "application/json, text/event-stream;q=0.9")
	assert.True(t, wantsStream(r, v1.InvokeRequest{}))

	g := httptest.NewRequest("GET", "/x/stream?after=7", nil)
	n, ended, err := lastEventID(g)
	assert.NoError(t, err)
	assert.EqualValues(t, 7, n)
	assert.False(t, ended)
	g.Header.Set("Last-Event-ID", "42")
	n, _, err = lastEventID(g)
	assert.NoError(t, err)
	assert.EqualValues(t, 42, n, "the header wins")
	g.Header.Set("Last-Event-ID", v1.ResultEventID)
	_, ended, err = lastEventID(g)
	assert.NoError(t, err)
	assert.True(t, ended, "the client had the result")
	g.Header.Set("Last-Event-ID", "-1")
	_, _, err = lastEventID(g)
	assert.ErrorContains(t, err, "Last-Event-ID")
}

// TestRecordChecks: when a chunk makes the stream read the Record again. A
// sibling's chunk claiming attempt 999999 must not use up the check of the
// real next attempt (its chunks would be dropped as foreign until a
// keepalive); invented attempts beyond the cap cost one read a second.
func TestRecordChecks(t *testing.T) {
	rec := messages.Record{Worker: "w1", Attempt: 1}
	now := time.Unix(1_700_000_000, 0)
	var rc recordChecks
	for i, tt := range []struct {
		worker  string
		attempt int
		want    bool
	}{
		{"w1", 1, false},      // the Record names this attempt
		{"w2", 999999, true},  // a forged attempt: read once
		{"w2", 999999, false}, // …not again
		{"w3", 2, true},       // the real next attempt is still checked
		{"w3", 2, false},
	} {
		assert.Equal(t, tt.want, rc.need(rec, chunkMeta{worker: tt.worker, attempt: tt.attempt}, now), "step %d", i)
	}
	for a := 3; len(rc.seen) < maxRecordChecks; a++ {
		require.True(t, rc.need(rec, chunkMeta{worker: "w2", attempt: a}, now))
	}
	assert.False(t, rc.need(rec, chunkMeta{worker: "w4", attempt: 5000}, now), "past the cap, within the second")
	assert.True(t, rc.need(rec, chunkMeta{worker: "w4", attempt: 5000}, now.Add(time.Second)), "past the cap, a second later")
}
