package rawjson

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAppendUnquotedIsEncodingJSONs(t *testing.T) {
	for _, raw := range []string{
		`""`, `"a"`, `"\u0061"`, `"\u00e9\u00E9"`, `"\"\\\/\b\f\n\r\t"`, `"a\u0000b"`, `"\u001f\u007f"`,
		`"\ud83d\ude00"`, `"\uD83D\uDE00"`, `"\udbff\udfff"`, `"\ud800"`, `"\udc00"`, `"\udc00\ud800"`,
		`"\ud800\u0041"`, `"\ud800\ud800\udc00"`, `"\ud800\n"`, `"\ud800\\u0041"`, `"x\ud800"`,
		"\"\xff\"", "\"\xe2\x82\"", "\"\xed\xa0\x80\"", "\"\xf0\x9f\x98\x80\"", "\"é\\u00e9\xff<\u2028\"",
	} {
		require.True(t, json.Valid([]byte(raw)), "%q", raw)
		var want string
		require.NoError(t, json.Unmarshal([]byte(raw), &want))
		got := appendUnquoted([]byte("kept:"), []byte(raw))
		assert.Equal(t, "kept:"+want, string(got), "%q", raw)
	}
}
