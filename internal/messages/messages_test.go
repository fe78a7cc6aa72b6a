package messages

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSubjects(t *testing.T) {
	s := Subjects{Prefix: "rs"}
	for _, tt := range []struct{ got, want string }{
		{s.Invoke("team-a", "echo"), "rs.invoke.team-a.echo"},
		{s.Dispatch("team-a", "echo", "echo-1"), "rs.dispatch.team-a.echo.echo-1"},
		{s.Result("team-a", "echo"), "rs.result.team-a.echo"},
		{s.Metrics("team-a", "echo"), "rs.metrics.team-a.echo"},
		{s.Events("team-a", "echo", "echo-1"), "rs.metrics.team-a.echo.echo-1"},
		{s.DeadLetter("team-a", "echo"), "rs.deadletter.team-a.echo"},
		{s.Cancel("team-a", "echo", "echo-1"), "rs.cancel.team-a.echo.echo-1"},
		{s.Reply("team-a", "echo"), "rs.reply.team-a.echo"},
		{WorkerInbox("team-a", "echo", "echo-1"), "_INBOX_RP.team-a.echo.echo-1"},
	} {
		assert.Equal(t, tt.want, tt.got)
	}
}

// TestParseSubjects: an invoke, dispatch or result subject reads back as
// what built it; any other subject is refused.
func TestParseSubjects(t *testing.T) {
	s := Subjects{Prefix: "runtime.serverless"}
	ns, pool, ok := s.ParseInvoke(s.Invoke("team-a", "echo"))
	assert.True(t, ok)
	assert.Equal(t, []string{"team-a", "echo"}, []string{ns, pool})
	ns, pool, ok = s.ParseResult(s.Result("team-a", "echo"))
	assert.True(t, ok)
	assert.Equal(t, []string{"team-a", "echo"}, []string{ns, pool})
	ns, pool, worker, ok := s.ParseDispatch(s.Dispatch("team-a", "echo", "echo-1"))
	assert.True(t, ok)
	assert.Equal(t, []string{"team-a", "echo", "echo-1"}, []string{ns, pool, worker})

	for _, tc := range []struct{ name, subject string }{
		{"another prefix", "other.serverless.invoke.team-a.echo"},
		{"a longer prefix", "runtime.serverless.x.invoke.team-a.echo"},
		{"the prefix run into the kind", "runtime.serverlessinvoke.team-a.echo"},
		{"another kind", "runtime.serverless.result.team-a.echo.x"},
		{"a token missing", "runtime.serverless.invoke.team-a"},
		{"an empty token", "runtime.serverless.invoke..echo"},
		{"an empty last token", "runtime.serverless.invoke.team-a."},
		{"one token too many", "runtime.serverless.invoke.team-a.echo.w"},
		{"nothing after the kind", "runtime.serverless.invoke."},
		{"the prefix alone", "runtime.serverless"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, ok := s.ParseInvoke(tc.subject)
			assert.False(t, ok, "invoke")
			// The same defect in the other kinds' subjects ("invoke"
			// without its dots: the rows that run it into the prefix too).
			dispatch := strings.Replace(tc.subject, "invoke", "dispatch", 1) + ".w"
			if tc.name == "one token too many" {
				dispatch += ".x"
			}
			_, _, _, ok = s.ParseDispatch(dispatch)
			assert.False(t, ok, "dispatch %s", dispatch)
			result := strings.Replace(tc.subject, "invoke", "result", 1)
			_, _, ok = s.ParseResult(result)
			assert.False(t, ok, "result %s", result)
		})
	}
}

func TestConsumerName(t *testing.T) {
	for _, tt := range []struct{ ns, pool, worker, want string }{
		{"team-a", "echo", "echo-7d9f-abc", "team-a_echo_echo-7d9f-abc"},
		{"ns", "my_pool", "w", "ns_my_pool_w"},
		{"ns", "a.b", "w*", "ns_a_b_w_"},
	} {
		assert.Equal(t, tt.want, ConsumerName(tt.ns, tt.pool, tt.worker), "ConsumerName(%q, %q, %q)", tt.ns, tt.pool, tt.worker)
	}
}

func TestValidateToken(t *testing.T) {
	for _, v := range []string{"", "a.b", "*", ">", "a b", "a\tb"} {
		assert.Error(t, ValidateToken("pool", v), "%q", v)
	}
	assert.NoError(t, ValidateToken("pool", "team-a_echo-1"))
}

func TestPayloadSize(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, raw string
		want                   int64
	}{
		{"json object", "", `{"a":1}`, 7},
		{"json with charset", "application/json; charset=utf-8", `"abcd"`, 6},
		{"json suffix", "application/cloudevents+json", `[1,2]`, 5},
		{"binary, no padding", "image/png", `"AAAA"`, 3},
		{"binary, one pad", "image/png", `"AAA="`, 2},
		{"binary, two pads", "application/octet-stream", `"AA=="`, 1},
		{"binary, empty", "image/png", `""`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, PayloadSize(tc.contentType, json.RawMessage(tc.raw)))
		})
	}
}

// TestChunkSubjects: a chunk subject names its worker, which a reader
// takes back from it; anything else names none.
func TestChunkSubjects(t *testing.T) {
	s := Subjects{Prefix: "runtime.serverless"}
	subj := s.ChunkSubject("team-a", "llm", "llm-7f9", "inv-1")
	assert.Equal(t, "runtime.serverless.chunks.team-a.llm.llm-7f9.inv-1", subj)
	assert.Equal(t, "llm-7f9", s.ChunkWorker(subj))
	for _, bad := range []string{"runtime.serverless.chunk.team-a.llm.inv-1", "runtime.serverless.chunks.team-a.llm.inv-1",
		"runtime.serverless.chunks.team-a.llm.w.x.inv-1", "other.chunks.team-a.llm.w.inv-1"} {
		assert.Empty(t, s.ChunkWorker(bad), bad)
	}
	assert.Equal(t, []string{"runtime.serverless.chunks.team-a.>"}, s.ChunkStreamSubjects("team-a"))
	assert.Equal(t, "RUNTIME_SERVERLESS_CHUNKS_team-a", ChunksStreamName("RUNTIME_SERVERLESS", "team-a"))
}

// TestEncodeKeepsHTMLCharacters: a payload of '<' is stored at its size,
// and decodes to the same payload.
func TestEncodeKeepsHTMLCharacters(t *testing.T) {
	payload := json.RawMessage(`"<<>>&&` + "\u2028" + `"`)
	b, err := Encode(Invocation{InvocationID: "i", Payload: payload})
	require.NoError(t, err)
	assert.Contains(t, string(b), string(payload))
	var got Invocation
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Equal(t, payload, got.Payload)
}
