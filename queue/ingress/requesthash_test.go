package ingress

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	v1 "github.com/runplane/runplane/api/serverless/v1"
)

// requestHashDecoded is requestHash as it was before rawjson.WriteSorted
// (the payload decoded into an any and encoded again): the Records stored
// before hold its hashes, so the tests compare with it.
func requestHashDecoded(req v1.InvokeRequest) (string, error) {
	var payload any
	if len(req.Payload) > 0 {
		dec := json.NewDecoder(bytes.NewReader(req.Payload))
		dec.UseNumber()
		if err := dec.Decode(&payload); err != nil {
			return "", fmt.Errorf("field payload: %w", err)
		}
	}
	b, err := json.Marshal(struct {
		Payload     any               `json:"payload"`
		Headers     map[string]string `json:"headers"`
		Attributes  map[string]string `json:"attributes"`
		ContentType string            `json:"contentType"`
	}{payload, req.Headers, req.Attributes, req.ContentType})
	if err != nil {
		return "", fmt.Errorf("canonical request: %w", err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

func TestRequestHashIsTheStoredRecordsHash(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  v1.InvokeRequest
	}{
		{name: "no payload", req: v1.InvokeRequest{}},
		{name: "null payload", req: v1.InvokeRequest{Payload: json.RawMessage(`null`)}},
		{name: "base64 blob", req: v1.InvokeRequest{Payload: json.RawMessage(`{"blob":"` + strings.Repeat("QUJD+/==", 1000) + `"}`), ContentType: "application/json"}},
		{name: "binary payload", req: v1.InvokeRequest{Payload: json.RawMessage(`"AAEC/w=="`), ContentType: "application/octet-stream"}},
		{name: "white space, key order, duplicates", req: v1.InvokeRequest{Payload: json.RawMessage("{ \"b\" : [1, {\"y\":2,\"x\":3}],\n\"a\":\"<&>\", \"b\": 0.50 }")}},
		{name: "escapes and bad UTF-8", req: v1.InvokeRequest{Payload: json.RawMessage("[\"\\u00e9\\ud800\\/\xff\u2028\"]")}},
		{name: "headers and attributes", req: v1.InvokeRequest{Payload: json.RawMessage(`1`), Headers: map[string]string{"b": "<1>", "a": "2"}, Attributes: map[string]string{"k": "v"}, ContentType: "text/plain"}},
		{name: "empty maps are not nil ones", req: v1.InvokeRequest{Payload: json.RawMessage(`{}`), Headers: map[string]string{}, Attributes: map[string]string{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := requestHashDecoded(tc.req)
			require.NoError(t, err)
			got, err := requestHash(tc.req)
			require.NoError(t, err)
			assert.Equal(t, want, got)
		})
	}
	// One hash written down, of the form
	// {"payload":{"a":{"c":2,"d":1},"b":[1,"\u003c"]},"headers":{"x":"y"},"attributes":null,"contentType":"application/json"}
	// (sha256sum of those bytes).
	got, err := requestHash(v1.InvokeRequest{Payload: json.RawMessage(`{ "b": [1, "<"], "a": {"d": 1, "c": 2} }`), Headers: map[string]string{"x": "y"}, ContentType: "application/json"})
	require.NoError(t, err)
	assert.Equal(t, "sha256:2b80971f41f3c8d5b8c1fce5ba0b07360464789d608402c3129a3b9ff351afd5", got)
}

func TestRequestHashRefusesAnInvalidPayload(t *testing.T) {
	_, err := requestHash(v1.InvokeRequest{Payload: json.RawMessage(`{"a": }`)})
	require.ErrorContains(t, err, "field payload: invalid character '}' looking for the beginning of a value at offset 6")
}

// BenchmarkRequestHash: requestHash (rawjson.WriteSorted into the hash)
// against the decode and encode it replaced, same run: a 10 MiB payload
// {"blob":"<base64>"} (queue's BenchmarkPayloadRoundTrip), a nested
// one written as Python's json.dumps writes (spaces, keys unsorted,
// < in strings: nothing of it is as json.Marshal writes it), and 1 MiB of
// shapes a tenant may send to make the hash costly: one key repeated,
// plainly or escaped, empty objects, strings that need HTML escapes.
func BenchmarkRequestHash(b *testing.B) {
	raw := make([]byte, (10<<20)*3/4)
	_, err := rand.Read(raw)
	require.NoError(b, err)
	blob, err := json.Marshal(map[string]string{"blob": base64.StdEncoding.EncodeToString(raw)})
	require.NoError(b, err)
	var nested strings.Builder
	nested.WriteString(`{"items": [`)
	for i := range 2000 {
		if i > 0 {
			nested.WriteString(", ")
		}
		fmt.Fprintf(&nested, `{"name": "item <%d>", "id": %d, "tags": ["b", "a"], "meta": {"z": 1.50, "y": null, "x": {"w": [true, false]}}}`, i, i)
	}
	nested.WriteString(`], "count": 2000}`)
	repeated := func(open, item, closing string) []byte {
		n := (1 << 20) / (len(item) + 1)
		return []byte(open + strings.Repeat(item+",", n) + item + closing)
	}
	for _, p := range []struct {
		name    string
		payload []byte
	}{
		{"blob=10MiB", blob},
		{"nested=" + fmt.Sprint(nested.Len()>>10) + "KiB", []byte(nested.String())},
		{"repeatedKey=1MiB", repeated("{", `"a":0`, "}")},
		{"repeatedEscapedKey=1MiB", repeated("{", `"\u0061":0`, "}")},
		{"emptyObjects=1MiB", repeated("[", `{}`, "]")},
		{"htmlStrings=1MiB", repeated("[", `"<"`, "]")},
	} {
		req := v1.InvokeRequest{Payload: p.payload, Headers: map[string]string{"x": "y"}, ContentType: "application/json"}
		for _, f := range []struct {
			name string
			hash func(v1.InvokeRequest) (string, error)
		}{{"decoded", requestHashDecoded}, {"sorted", requestHash}} {
			b.Run(p.name+"/"+f.name, func(b *testing.B) {
				b.SetBytes(int64(len(p.payload)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := f.hash(req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
