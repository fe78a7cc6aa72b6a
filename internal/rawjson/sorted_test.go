package rawjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// decodedForm is the form WriteSorted writes, made the way requestHash
// made it before WriteSorted: v decoded into an any (UseNumber) and
// encoded again. It is the reference the tests compare with.
func decodedForm(v []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return nil, err
	}
	return json.Marshal(x)
}

func sorted(v []byte) ([]byte, error) {
	var b bytes.Buffer
	err := WriteSorted(&b, v)
	return b.Bytes(), err
}

// sortedSeeds are the table's inputs and the fuzzer's seeds.
var sortedSeeds = []string{
	`{"a":[1,2.5e3,"x"],"b":null}`,
	`"` + strings.Repeat("QUJD+/==", 8) + `"`,
	`{"blob":"` + strings.Repeat("QUJD", 64) + `"}`,
	"{ \"b\" :\t[1,\n2] , \"a\": {} }\r\n",
	`{"b":1,"a":2}`,
	`{"a":1,"a":2,"b":{"y":1,"x":2,"y":3},"a":3}`,
	`{"a":1,"\u0061":2}`,
	`{"\u00e9":1,"é":2,"e":3}`,
	`{"<":1,"&":2,">":3,"\u2028":4}`,
	`{"ab":1,"a":2,"a\u0000":3,"":4}`,
	`["<a href='x'>&</a>","\u2028\u2029",  "` + "\u2028" + `"]`,
	`"\u0041\/\n\b\f\t\r\"\\ \u001f \u007f"`,
	`"\ud83d\ude00 \ud83d \ude00 \ud83d\ud83d\ude00 \udc00\ud800"`,
	"\"bad \xff utf8 \xed\xa0\x80 \xe2\x82\"",
	"{\"\xff\":1,\"\\ufffd\":2,\"\xef\xbf\xbd\":3}",
	`[-0,0.5,1E+2,-1e-0,12345678901234567890123,1.000]`,
	`[true,false,null,[],{},[[]],{"a":[{}]}]`,
	`  [ 1 , [ 2 , { "z" : [ 3 ] , "y" : 4 } ] ]  `,
	`{"z":{"b":[{"d":1,"c":2}],"a":"x"},"y":[{"q":" ","p":"<"}]}`,
	`{"a":{"b":1}, "a":{"c":2}}`,
	`null`,
	`0`,
	`""`,
}

func TestWriteSortedIsDecodeAndMarshal(t *testing.T) {
	for _, in := range sortedSeeds {
		t.Run(in, func(t *testing.T) {
			want, err := decodedForm([]byte(in))
			require.NoError(t, err)
			got, err := sorted([]byte(in))
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))
		})
	}
}

// Strings are skipped a word of 8 bytes at a time while no byte needs a
// look: each byte that does, at each place in a word, is seen.
func TestWriteSortedSeesEachByteOfAWord(t *testing.T) {
	for _, special := range []string{`\"`, `\\`, `\n`, `\u0041`, "<", ">", "&", "\u2028", "\xff", "é", "\x7f"} {
		for at := range 17 {
			in := `"` + strings.Repeat("x", at) + special + strings.Repeat("y", 17-at) + `"`
			want, err := decodedForm([]byte(in))
			require.NoError(t, err)
			got, err := sorted([]byte(in))
			require.NoError(t, err)
			require.Equal(t, string(want), string(got), "%q", in)
		}
	}
	for at := range 17 {
		_, err := sorted([]byte(`"` + strings.Repeat("x", at) + "\x01" + strings.Repeat("y", 17-at) + `"`))
		require.Error(t, err, "a control character at %d", at)
	}
}

func TestWriteSortedForms(t *testing.T) {
	for in, want := range map[string]string{
		`{"b":1,"a":2,"b":3}`:         `{"a":2,"b":3}`,
		`{ "x" : "<&>" }`:             `{"x":"\u003c\u0026\u003e"}`,
		`"\u00e9\/"`:                  `"é/"`,
		`[ 1.50 , -0 ]`:               `[1.50,-0]`,
		"\"\xff\"":                    "\"\xef\xbf\xbd\"",
		`"\ud800"`:                    "\"\xef\xbf\xbd\"",
		`{"é":1,"f":2,"\u00e8":3}`:    `{"f":2,"è":3,"é":1}`,
		`{"a":{"d":[{"c":1,"b":2}]}}`: `{"a":{"d":[{"b":2,"c":1}]}}`,
	} {
		got, err := sorted([]byte(in))
		require.NoError(t, err, in)
		assert.Equal(t, want, string(got), in)
	}
}

// A string of valid UTF-8 without escapes that json.Marshal changes is
// written by json.HTMLEscape: its escapes are json.Marshal's (U+2028 and
// U+2029 included), and the rest, é and 0x7f among it, stays.
func TestWriteSortedHTMLEscapesAsMarshal(t *testing.T) {
	for _, str := range []string{"<", ">", "&", "\u2028", "\u2029", "a<b>&c", "é<", "\x7f&", "<\u2028é\x7f\u2029>", "x\u2028"} {
		in := []byte(`["` + str + `",{"` + str + `":"` + str + `"}]`)
		s, err := scanString(in, 1)
		require.NoError(t, err)
		require.True(t, s.decoded && !s.plain, "%q takes json.HTMLEscape's way", str)
		want, err := json.Marshal([]any{str, map[string]string{str: str}})
		require.NoError(t, err)
		got, err := sorted(in)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got), "%q", str)
	}
	got, err := sorted([]byte("\"\u2028\u2029\""))
	require.NoError(t, err)
	assert.Equal(t, `"\u2028\u2029"`, string(got))
}

// A string with escapes is written from its decoded value: by
// json.HTMLEscape unless the value holds " \ or a control character.
func TestWriteSortedEscapedStrings(t *testing.T) {
	for _, in := range []string{
		`"\u0061"`, `"\u003c\u0026\u003e"`, `"\/"`, `"\u2028\u2029"`, "\"\xff<\"", `"\u00e9\u007f"`,
		`"\ud800"`, `"\""`, `"\\"`, `"\n\t\u0001\u001f"`, `"a\u0022b"`, `"\b\f"`, `"\ud83d\ude00&"`,
	} {
		want, err := decodedForm([]byte(in))
		require.NoError(t, err, in)
		got, err := sorted([]byte(in))
		require.NoError(t, err, in)
		assert.Equal(t, string(want), string(got), in)
	}
}

func TestWriteSortedRefusesInvalidJSON(t *testing.T) {
	for _, in := range []string{
		``, ` `, `{`, `[1,2`, `{"a":}`, `{"a" 1}`, `{a:1}`, `{"a":1,}`, `[1,]`, `[1 2]`,
		`"\x"`, `"\u12"`, `"\u12g4"`, "\"a\x01\"", `"abc`, `01`, `1.`, `.5`, `1e`, `1e+`, `-`, `+1`,
		`tru`, `nul`, `falsey`, `1 2`, `{"a":1}}`, `[]]`, `{"a":1 "b":2}`, `"\'"`,
	} {
		_, err := sorted([]byte(in))
		require.Error(t, err, "%q", in)
		require.False(t, json.Valid([]byte(in)), "%q is a refusal encoding/json makes too", in)
	}
}

func TestWriteSortedDepthIsEncodingJSONs(t *testing.T) {
	for _, open := range []string{"[", `{"a":`} {
		closing := map[string]string{"[": "]", `{"a":`: "}"}[open]
		deepest := strings.Repeat(open, maxDepth) + "1" + strings.Repeat(closing, maxDepth)
		want, err := decodedForm([]byte(deepest))
		require.NoError(t, err)
		got, err := sorted([]byte(deepest))
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got))

		deeper := open + deepest + closing
		_, err = decodedForm([]byte(deeper))
		require.Error(t, err, "encoding/json refuses it")
		_, err = sorted([]byte(deeper))
		require.ErrorContains(t, err, "nesting deeper than 10000")
	}
}

// A value already as json.Marshal writes it reaches w in one piece, not
// copied through the buffer: the 10 MiB base64 string of a payload.
func TestWriteSortedWritesAPlainValueInOnePiece(t *testing.T) {
	blob := `{"blob":"` + strings.Repeat("QUJD", 1<<16) + `"}`
	var w countingWriter
	require.NoError(t, WriteSorted(&w, []byte(blob)))
	assert.Equal(t, []int{len(blob)}, w.writes)

	blob = `{"z":1, "blob":"` + strings.Repeat("QUJD", 1<<16) + `"}`
	w = countingWriter{}
	require.NoError(t, WriteSorted(&w, []byte(blob)))
	assert.Contains(t, w.writes, len(`"`+strings.Repeat("QUJD", 1<<16)+`"`), "the member's value goes as it is")
}

type countingWriter struct{ writes []int }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, len(p))
	return len(p), nil
}

func TestWriteSortedReturnsTheWritersError(t *testing.T) {
	err := WriteSorted(failingWriter{}, []byte(`{"b":1,"a":2}`))
	require.ErrorIs(t, err, errWrite)
}

var errWrite = errors.New("write failed")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errWrite }

// FuzzWriteSorted: for any valid JSON, WriteSorted writes exactly what the
// decode and encode of requestHash wrote (the stored Records' hashes
// depend on it); anything else is refused.
func FuzzWriteSorted(f *testing.F) {
	for _, s := range sortedSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := sorted(in)
		if !json.Valid(in) {
			require.Error(t, err, "%q is not valid JSON", in)
			return
		}
		require.NoError(t, err, "%q", in)
		want, err := decodedForm(in)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "%q", in)
	})
}
