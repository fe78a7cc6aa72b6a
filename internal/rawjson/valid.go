package rawjson

import (
	"bytes"
	"fmt"
	"slices"
)

// Valid reports whether v is one JSON value with nothing but white space
// around it: json.Valid's verdict (FuzzValid holds the two equal), in one
// pass that skips a string's plain bytes a word at a time. encoding/json's
// scanner calls a state function per byte: json.Valid takes ~26 ms of a
// 10 MiB payload's CPU wherever one is checked, this ~5 (BenchmarkValid).
func Valid(v []byte) bool {
	end, _, err := walk{v: v}.value(skipSpace(v, 0), 0)
	return err == nil && skipSpace(v, end) == len(v)
}

// found is what findMember learns of an object's members named name.
type found struct {
	value    []byte  // the last one's value, a slice of the object
	matches  int     // how many members have the name
	from, to int     // the last one's place with a comma next to it: obj without obj[from:to] has no such member when matches is 1
	unknown  *string // the first key that no name of known takes (with known)
}

// findMember validates obj, one JSON object with nothing but white space
// around it, and finds its members that encoding/json would decode into a
// struct field named name: those whose decoded key equals name but for
// case (encoding/json's match), the last one's value the field's. null,
// which encoding/json decodes into a struct as nothing, is an object
// without members here. It holds nothing per member: a tenant's body of
// many small members ({"":0,"":0,…}, 5 bytes each) made a first version
// hold 48 bytes for each, ~41 times the body. With known (not nil), the
// first key that matches none of known as encoding/json matches a field is
// noted.
func findMember(obj []byte, name string, known []string) (found, error) {
	var f found
	start := skipSpace(obj, 0)
	if start >= len(obj) {
		return f, errEnd
	}
	if bytes.HasPrefix(obj[start:], []byte("null")) && skipSpace(obj, start+4) == len(obj) {
		return f, nil
	}
	if obj[start] != '{' {
		return f, invalid(obj, start, "looking for the beginning of an object")
	}
	var key []byte
	// The member goes with the comma before it, or after it (up to the
	// next member: extend) when it is the first.
	prevEnd, extend := -1, false
	end, _, err := walk{v: obj}.object(start, 1, func(m span) {
		k := obj[m.key:m.keyEnd]
		if !m.decoded {
			key = appendUnquoted(key[:0], obj[m.key-1:m.keyEnd+1])
			k = key
		}
		switch {
		case bytes.EqualFold(k, []byte(name)):
			f.matches++
			f.value = obj[m.value:m.end]
			if prevEnd >= 0 {
				f.from, f.to, extend = prevEnd, m.end, false
			} else {
				f.from, f.to, extend = m.at, m.end, true
			}
		case extend:
			f.to, extend = m.at, false
		}
		if known != nil && f.unknown == nil && !slices.ContainsFunc(known, func(n string) bool { return bytes.EqualFold(k, []byte(n)) }) {
			f.unknown = new(string(k))
		}
		prevEnd = m.end
	})
	if err != nil {
		return f, err
	}
	if i := skipSpace(obj, end); i < len(obj) {
		return f, fmt.Errorf("rawjson: trailing data after the JSON object at offset %d (%q): one JSON object was expected", i, obj[i])
	}
	return f, nil
}

// without is obj without the one member f found (matches is 1), in one
// buffer of its size.
func (f found) without(obj []byte) []byte {
	rest := make([]byte, 0, len(obj)-(f.to-f.from))
	return append(append(rest, obj[:f.from]...), obj[f.to:]...)
}
