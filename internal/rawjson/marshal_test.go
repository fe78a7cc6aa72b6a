package rawjson

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pad is a JSON string long enough for Marshal to place a value holding
// it as it is.
var pad = `"` + strings.Repeat("x", minRaw) + `"`

type inner struct {
	Headers map[string]string `json:"headers,omitempty"`
	Body    json.RawMessage   `json:"body,omitempty"`
	Error   string            `json:"error,omitempty"`
}

type outer struct {
	ID       string `json:"id"`
	Response *inner `json:"response,omitempty"`
	Tail     string `json:"tail"`
}

func TestMarshalIsJSONMarshal(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    outer
	}{
		{name: "body in the middle", v: outer{ID: "a", Response: &inner{Headers: map[string]string{"x": "y"}, Body: json.RawMessage(`{"b":[1,2,"<\u2028>"],"pad":` + pad + `}`), Error: "e"}, Tail: "t"}},
		{name: "placeholder look-alikes around it", v: outer{ID: `0"body":0`, Response: &inner{Headers: map[string]string{"body": "0", "0": "1"}, Body: json.RawMessage(`[0,` + pad + `]`), Error: "1"}, Tail: "0"}},
		{name: "a string body", v: outer{ID: "a", Response: &inner{Body: json.RawMessage(`"QUJD` + strings.Repeat("QUJD", minRaw) + `"`)}}},
		{name: "a short body", v: outer{ID: "a", Response: &inner{Body: json.RawMessage(`"QUJD"`)}}},
		{name: "no body: omitted", v: outer{ID: "a", Response: &inner{Error: "e"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			canon, err := Canonical(tc.v.Response.Body)
			require.NoError(t, err)
			tc.v.Response.Body = canon
			want, err := json.Marshal(tc.v)
			require.NoError(t, err)
			got, err := Marshal(&tc.v, &tc.v.Response.Body)
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))
			assert.Equal(t, string(canon), string(tc.v.Response.Body), "the field is restored")
		})
	}
}

func TestMarshalWritesTheValueAsItIs(t *testing.T) {
	body := `{ "html": "<&>", "pad": ` + pad + ` }`
	v := outer{ID: "a", Response: &inner{Body: json.RawMessage(body)}}
	got, err := Marshal(&v, &v.Response.Body)
	require.NoError(t, err)
	assert.Equal(t, `{"id":"a","response":{"body":`+body+`},"tail":""}`, string(got))
}

// TestMarshalPartsPlacesTheValueItself: the pieces join into Marshal's
// output, and the middle one is the field's value, not a copy.
func TestMarshalPartsPlacesTheValueItself(t *testing.T) {
	body := json.RawMessage(`[` + pad + `]`)
	v := outer{ID: "a", Response: &inner{Body: body}, Tail: "t"}
	parts, err := MarshalParts(&v, &v.Response.Body)
	require.NoError(t, err)
	require.Len(t, parts, 3)
	assert.Equal(t, `{"id":"a","response":{"body":`, string(parts[0]))
	assert.Same(t, &body[0], &parts[1][0])
	assert.Equal(t, `},"tail":"t"}`, string(parts[2]))
}

func TestMarshalLeavesAShortValueToEncodingJSON(t *testing.T) {
	v := outer{ID: "a", Response: &inner{Body: json.RawMessage(`{ "html": "<&>" }`)}}
	got, err := Marshal(&v, &v.Response.Body)
	require.NoError(t, err)
	assert.Equal(t, `{"id":"a","response":{"body":{"html":"\u003c\u0026\u003e"}},"tail":""}`, string(got))
}

func TestMarshalRefusesAFieldOutsideV(t *testing.T) {
	v := outer{ID: "a", Response: &inner{Body: json.RawMessage(pad)}}
	other := json.RawMessage(pad)
	_, err := Marshal(&v, &other)
	require.Error(t, err)
	assert.Equal(t, pad, string(other))
}

func TestCanonical(t *testing.T) {
	for _, tc := range []struct {
		name, v string
		same    bool // v is returned as it is (no copy)
	}{
		{name: "compact", v: `{"a":[1,2.5e3,"x"],"b":null}`, same: true},
		{name: "base64 string", v: `"` + strings.Repeat("QUJD+/==", 8) + `"`, same: true},
		{name: "white space", v: "{ \"a\" :\t[1,\n2] }\r\n"},
		{name: "space in a string", v: `"a b"`},
		{name: "html", v: `"<a href='x'>&</a>"`},
		{name: "line terminators", v: "\"\u2028\u2029\""},
		{name: "other escapes kept", v: `"\u0041\/\n"`, same: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := json.Marshal(json.RawMessage(tc.v))
			require.NoError(t, err)
			in := []byte(tc.v)
			for name, canon := range map[string]func([]byte) ([]byte, error){"Canonical": Canonical, "CanonicalChecked": CanonicalChecked} {
				got, err := canon(in)
				require.NoError(t, err, name)
				assert.Equal(t, string(want), string(got), name)
				assert.Equal(t, tc.same, &in[0] == &got[0], "%s: v itself is returned exactly when nothing changes", name)
			}
		})
	}
	_, err := Canonical([]byte(`{"a": }`))
	require.Error(t, err, "an invalid value that needs a change is refused")
	// A worker's bytes: refused whether or not they would need a change.
	for _, bad := range []string{`{"a":}`, `{"a": }`, `[1,2`, `"\x"`, ``} {
		_, err := CanonicalChecked([]byte(bad))
		require.Error(t, err, "%q", bad)
	}
}
