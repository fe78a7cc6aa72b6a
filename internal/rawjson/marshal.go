package rawjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Marshal is json.Marshal(v) with the value of *field written as it is,
// where json.Marshal would validate, compact and HTML-escape it once more.
// field is a json.RawMessage inside v (v holds it, directly or behind a
// pointer, once) and the caller vouches for its value: valid JSON, and
// already as json.Marshal writes it (Canonical) when the output must be
// byte for byte json.Marshal's. *field is restored before Marshal returns.
func Marshal(v any, field *json.RawMessage) ([]byte, error) {
	parts, err := MarshalParts(v, field)
	if err != nil {
		return nil, err
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	return bytes.Join(parts, nil), nil
}

// MarshalParts is Marshal in the pieces it joins: what comes before the
// field's value, the value itself (*field, not a copy) and what follows
// it; one piece when the value is short. A caller that writes the pieces
// in turn (an HTTP answer) saves the joined copy (~10–20 ms of a 10 MiB
// answer's CPU on this machine, most of it first touches of new memory).
//
// v is encoded twice with a one-byte placeholder at field, 0 and then 1:
// the one byte in which the two differ is the field's place, whatever v's
// layout, so no encoding of v is written by hand here. A value shorter
// than minRaw is left to json.Marshal: its pass over the value costs less
// than the second encoding.
func MarshalParts(v any, field *json.RawMessage) ([][]byte, error) {
	value := *field
	if len(value) < minRaw {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		return [][]byte{b}, nil
	}
	defer func() { *field = value }()
	*field = json.RawMessage("0")
	zero, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("rawjson: %w", err)
	}
	*field = json.RawMessage("1")
	one, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("rawjson: %w", err)
	}
	i := firstDiff(zero, one)
	if len(zero) != len(one) || i < 0 || zero[i] != '0' || !bytes.Equal(zero[i+1:], one[i+1:]) {
		return nil, errors.New("rawjson: the field is not one value of v")
	}
	return [][]byte{zero[:i], value, zero[i+1:]}, nil
}

// minRaw is the smallest value Marshal places as it is (4 KiB: encoding
// an invocation's envelope takes a few µs, as long as encoding/json takes
// over a few KiB).
const minRaw = 4 << 10

// firstDiff is the first index where a and b differ (-1: none within the
// shorter).
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

var (
	// lineSep and paraSep are U+2028 and U+2029 in UTF-8, which
	// encoding/json escapes (JavaScript line terminators).
	lineSep = []byte("\u2028")
	paraSep = []byte("\u2029")
)

// Canonical returns the valid JSON value v as json.Marshal writes a
// json.RawMessage holding it: compact, with <, > and &, U+2028 and U+2029
// escaped. When v has none of those characters and no white space at all
// (what encoding/json wrote — the framework package's answers — and every
// base64 body), that changes no byte and v itself is returned, found by a
// byte search instead of encoding/json's scan and copy; otherwise it is
// json.Marshal's. Bytes nobody validated go to CanonicalChecked: Canonical
// returns them unchecked when they need no change.
func Canonical(v []byte) ([]byte, error) {
	if asWritten(v) {
		return v, nil
	}
	return canonical(v)
}

// CanonicalChecked is Canonical for bytes nobody validated (a worker's
// Object Store object): one pass checks them either way — Valid when
// they need no change, encoding/json's compaction (which refuses invalid
// JSON) when they do. A Python framework's answers have white space
// (json.dumps' separators): json.Valid and then Canonical scanned those
// twice.
func CanonicalChecked(v []byte) ([]byte, error) {
	if !asWritten(v) {
		return canonical(v)
	}
	if !Valid(v) {
		return nil, errors.New("rawjson: not valid JSON")
	}
	return v, nil
}

// asWritten reports whether json.Marshal would write the valid JSON v as
// it is: no white space, no character it escapes.
func asWritten(v []byte) bool {
	return !bytes.ContainsAny(v, " \t\r\n<>&") && !bytes.Contains(v, lineSep) && !bytes.Contains(v, paraSep)
}

func canonical(v []byte) ([]byte, error) {
	b, err := json.Marshal(json.RawMessage(v))
	if err != nil {
		return nil, fmt.Errorf("rawjson: %w", err)
	}
	return b, nil
}
