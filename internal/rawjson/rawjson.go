// Package rawjson writes an opaque JSON value into an encoded object as it
// is. encoding/json validates and compacts every json.RawMessage it
// encodes (another scan and copy of a payload the ingress validated when
// it took it: 60 ms of a 10 MiB call's CPU per encoding, queue/README.md
// "Where a call's CPU goes"); no maintained encoder skips that, so the
// value is placed by hand here — a few lines that only place bytes
// (WithField, Marshal), and Canonical, which tells when encoding/json's
// pass would change nothing; WriteSorted writes the form a value has once
// decoded into an any and encoded again (the request hash's) without
// that decode. Reading, Valid and Unmarshal check a value in one pass
// that skips a string's plain bytes a word at a time, and Unmarshal hands
// an envelope's payload over as a slice of the body: encoding/json scans
// a byte at a time, twice per decode, and copies a json.RawMessage
// (BenchmarkValid, BenchmarkUnmarshal); encoding/json/v2 is behind
// GOEXPERIMENT=jsonv2 in Go 1.26, copies into a jsontext.Value too and
// matches names and duplicates otherwise than v1, whose rules the public
// API documents. The grammar is walked by one walk (walk.go) for all of
// them: WriteSorted's first pass is that walk with an index.
package rawjson

import (
	"bytes"
	"errors"
	"strconv"
)

// WithField returns the JSON object obj (as json.Marshal writes one: no
// surrounding space, without key) with "key": value added as its last
// member; key is a plain ASCII name (a Go constant of the caller's).
// value is written as it is: the caller vouches that it is one valid JSON
// value (decoded or validated before). An empty value adds nothing, as
// omitempty.
func WithField(obj []byte, key string, value []byte) ([]byte, error) {
	if len(value) == 0 {
		return obj, nil
	}
	if len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		return nil, errors.New("rawjson: not an encoded JSON object")
	}
	out := make([]byte, 0, len(obj)+len(key)+len(value)+4)
	out = append(out, obj[:len(obj)-1]...)
	if !bytes.Equal(obj, []byte("{}")) {
		out = append(out, ',')
	}
	out = strconv.AppendQuote(out, key)
	out = append(out, ':')
	out = append(out, value...)
	return append(out, '}'), nil
}
