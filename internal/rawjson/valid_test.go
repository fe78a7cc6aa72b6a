package rawjson

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// invalidSeeds are inputs json.Valid refuses, one per way to be wrong.
var invalidSeeds = []string{
	``, ` `, `{`, `}`, `[1,]`, `[,1]`, `{"a":}`, `{"a" 1}`, `{"a":1,}`, `{a:1}`, `{"a":1 "b":2}`,
	`"abc`, "\"\x01\"", `"\x"`, `"\u12"`, `"\u12g4"`, `01`, `1.`, `1e`, `-`, `.5`, `+1`, `tru`, `nul`, `nulll`,
	`1 2`, `{} x`, `[1]]`, `{"a":[}`, `[{]`, "\x00", `{"a":1}}`,
	strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
	`{"a":` + strings.Repeat(`{"a":`, maxDepth) + `1` + strings.Repeat("}", maxDepth+1),
}

// TestValidIsJSONValid: Valid's verdict is json.Valid's on the table,
// on generated values and on every prefix of them.
func TestValidIsJSONValid(t *testing.T) {
	in := append(append([]string{}, sortedSeeds...), invalidSeeds...)
	in = append(in, strings.Repeat("[", maxDepth)+strings.Repeat("]", maxDepth))
	r := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		var b strings.Builder
		genValue(r, &b, 0)
		s := b.String()
		in = append(in, s, s[:r.IntN(len(s)+1)], s+" ", s+",")
	}
	for _, s := range in {
		assert.Equal(t, json.Valid([]byte(s)), Valid([]byte(s)), "%.200q", s)
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range append(append([]string{}, sortedSeeds...), invalidSeeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		require.Equal(t, json.Valid(in), Valid(in), "%q", in)
	})
}

func TestFindMember(t *testing.T) {
	for _, tc := range []struct {
		name, in, rest, value string
		matches               int
		err                   string
	}{
		{name: "cut", in: `{"a":1,"payload":{"x":[1]},"b":"y"}`, rest: `{"a":1,"b":"y"}`, value: `{"x":[1]}`, matches: 1},
		{name: "white space kept", in: " { \"a\" : 1 ,\n\"payload\" : [ 1 ] , \"b\":2 } \n", rest: " { \"a\" : 1 , \"b\":2 } \n", value: `[ 1 ]`, matches: 1},
		{name: "first member: its comma goes with it", in: `{"payload":1 , "a":2}`, rest: `{"a":2}`, value: `1`, matches: 1},
		{name: "last member", in: `{"a":2 ,"payload":1 }`, rest: `{"a":2 }`, value: `1`, matches: 1},
		{name: "only member", in: `{"payload":"x"}`, rest: `{}`, value: `"x"`, matches: 1},
		{name: "escaped key", in: `{"pay\u006coad":null}`, rest: `{}`, value: `null`, matches: 1},
		{name: "case folded as encoding/json does, the last the value", in: `{"Payload":1,"a":2,"PAYLOAD":3}`, value: `3`, matches: 2},
		{name: "nested member not counted", in: `{"a":{"payload":1}}`},
		{name: "absent", in: `{"a":1}`},
		{name: "null", in: ` null `},
		{name: "not an object", in: `[1]`, err: `invalid character '[' looking for the beginning of an object at offset 0`},
		{name: "trailing data", in: `{"a":1} x`, err: `trailing data after the JSON object at offset 8 ('x')`},
		{name: "invalid inside the value", in: `{"payload":[1,}`, err: `invalid character '}' looking for the beginning of a value at offset 14`},
		{name: "empty", in: ``, err: `unexpected end of JSON input`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := findMember([]byte(tc.in), "payload", nil)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.matches, f.matches)
			assert.Equal(t, tc.value, string(f.value))
			if f.matches == 1 {
				assert.Equal(t, tc.rest, string(f.without([]byte(tc.in))))
			}
		})
	}
}

// envelope is a struct of the shape Unmarshal is for: a few fields and a
// payload.
type envelope struct {
	ID      string            `json:"id"`
	N       int               `json:"n,omitempty"`
	Tags    map[string]string `json:"tags,omitempty"`
	Payload json.RawMessage   `json:"payload,omitempty"`
}

// decodeStrict is the ingress's decode before Unmarshal: one object, no
// unknown field, nothing after it.
func decodeStrict(in []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data")
	}
	return nil
}

var envelopeSeeds = []string{
	`{"id":"x","payload":{"a":[1,"<"]}}`,
	`{"payload":1,"id":"x","Payload":[2]}`,
	`{"id":"x","n":"1"}`,
	`{"id":"x","bogus":1,"payload":2}`,
	`{"id":"x","tags":{"a":"b"},"payload":null}`,
	`{"PAYLOAD":"s","ID":"y"}`,
	`{"id":"x"} {}`,
	`{"id":"x","payload":}`,
	`[{"payload":1}]`,
	`"payload"`,
	` {"payload" : [ 1 , 2 ] } `,
	`null`,
	` null x`,
	`{"":{}}`,
}

// FuzzUnmarshal: Unmarshal decodes what json.Unmarshal decodes, and
// UnmarshalStrict what the strict decoder does; each refuses what its
// reference refuses.
func FuzzUnmarshal(f *testing.F) {
	for _, s := range envelopeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, c := range []struct {
			name      string
			reference func([]byte, any) error
			unmarshal func([]byte, any, string, *json.RawMessage) error
		}{
			{"lenient", json.Unmarshal, Unmarshal},
			{"strict", decodeStrict, UnmarshalStrict},
		} {
			var want, got envelope
			wantErr := c.reference(in, &want)
			gotErr := c.unmarshal(in, &got, "payload", &got.Payload)
			if wantErr != nil {
				require.Error(t, gotErr, "%s %q: the reference refused it: %v", c.name, in, wantErr)
				continue
			}
			require.NoError(t, gotErr, "%s %q", c.name, in)
			require.Equal(t, want, got, "%s %q", c.name, in)
		}
	})
}

// TestUnmarshalStrictNamesTheUnknownField: an unknown member is refused
// by name, checked in the validating pass for a flat struct (no decoder's
// copy of the body) and by json.Decoder for one with a struct inside.
func TestUnmarshalStrictNamesTheUnknownField(t *testing.T) {
	type nested struct {
		ID    string `json:"id"`
		Inner struct {
			A int `json:"a"`
		} `json:"inner"`
		Payload json.RawMessage `json:"payload"`
	}
	for _, tc := range []struct {
		name, in, err string
		v             any
	}{
		{name: "flat", in: `{"id":"x","priority":9,"payload":1}`, err: `unknown field "priority"`, v: &envelope{}},
		{name: "flat, the first unknown", in: `{"b":1,"a":2}`, err: `unknown field "b"`, v: &envelope{}},
		{name: "flat, case folded is known", in: `{"ID":"x","TAGS":{}}`, v: &envelope{}},
		{name: "flat, escaped key", in: `{"\u0078":1}`, err: `unknown field "x"`, v: &envelope{}},
		{name: "nested, known", in: `{"id":"x","inner":{"a":1}}`, v: &nested{}},
		{name: "nested, unknown inside", in: `{"id":"x","inner":{"b":1}}`, err: `unknown field "b"`, v: &nested{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p json.RawMessage
			err := UnmarshalStrict([]byte(tc.in), tc.v, "payload", &p)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
			want := decodeStrict([]byte(tc.in), tc.v)
			require.Error(t, want, "the reference refuses it too")
		})
	}
}

// TestUnmarshalAliasesTheInput: a payload that is most of the input is a
// slice of it, not a copy (what Unmarshal is for).
func TestUnmarshalAliasesTheInput(t *testing.T) {
	in := []byte(`{"id":"x","payload":"` + strings.Repeat("QUJD", 1024) + `"}`)
	var e envelope
	require.NoError(t, UnmarshalStrict(in, &e, "payload", &e.Payload))
	assert.Equal(t, "x", e.ID)
	require.NotEmpty(t, e.Payload)
	assert.Same(t, &in[len(`{"id":"x","payload":`)], &e.Payload[0])
}

// bigEnvelope is the envelope of a payload of n bytes shaped as the
// queue's benchmarks send one: {"blob":"<base64>"}.
func bigEnvelope(n int) []byte {
	raw := bytes.Repeat([]byte{0xfb, 0x10, 0x7e}, n/4)
	return []byte(`{"id":"x","n":3,"payload":{"blob":"` + base64.StdEncoding.EncodeToString(raw) + `"}}`)
}

// BenchmarkValid: Valid against json.Valid (the baseline) on a 10 MiB
// payload.
func BenchmarkValid(b *testing.B) {
	in := bigEnvelope(10 << 20)
	for _, c := range []struct {
		name  string
		valid func([]byte) bool
	}{{"baseline", json.Valid}, {"rawjson", Valid}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			for b.Loop() {
				if !c.valid(in) {
					b.Fatal("refused")
				}
			}
		})
	}
}

// BenchmarkUnmarshal: UnmarshalStrict against the strict json.Decoder
// the ingress had (the baseline) on a 10 MiB payload's envelope.
func BenchmarkUnmarshal(b *testing.B) {
	in := bigEnvelope(10 << 20)
	for _, c := range []struct {
		name   string
		decode func(*envelope) error
	}{
		{"baseline", func(e *envelope) error { return decodeStrict(in, e) }},
		{"rawjson", func(e *envelope) error { return UnmarshalStrict(in, e, "payload", &e.Payload) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				var e envelope
				if err := c.decode(&e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
