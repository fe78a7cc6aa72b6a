package rawjson

import (
	"bytes"
	"fmt"
)

// Valid reports whether v is one JSON value with nothing but white space
// around it: json.Valid's verdict (FuzzValid holds the two equal), in one
// pass that skips a string's plain bytes a word at a time. encoding/json's
// scanner calls a state function per byte: json.Valid takes ~26 ms of a
// 10 MiB payload's CPU wherever one is checked, this ~5 (BenchmarkValid).
func Valid(v []byte) bool {
	return check(v) == nil
}

// check is Valid with the reason.
func check(v []byte) error {
	i := skipSpace(v, 0)
	end, err := skip(v, i, 0)
	if err != nil {
		return err
	}
	if j := skipSpace(v, end); j < len(v) {
		return invalid(v, j, "after the value")
	}
	return nil
}

// skip validates the value at v[i], depth levels deep, and returns where
// it ends. Only the grammar is checked: no index is made (WriteSorted's
// first pass, which this mirrors, notes what its second needs).
func skip(v []byte, i, depth int) (int, error) {
	if i >= len(v) {
		return 0, errEnd
	}
	switch v[i] {
	case '"':
		s, err := scanString(v, i)
		return s.end, err
	case '[':
		return skipArray(v, i, depth+1)
	case '{':
		end, err := members(v, i, depth+1, nil)
		return end, err
	default:
		return scalar(v, i)
	}
}

func skipArray(v []byte, at, depth int) (int, error) {
	if depth > maxDepth {
		return 0, errDepth
	}
	i := skipSpace(v, at+1)
	if i < len(v) && v[i] == ']' {
		return i + 1, nil
	}
	for {
		end, err := skip(v, i, depth)
		if err != nil {
			return 0, err
		}
		i = skipSpace(v, end)
		switch {
		case i >= len(v):
			return 0, errEnd
		case v[i] == ',':
			i = skipSpace(v, i+1)
		case v[i] == ']':
			return i + 1, nil
		default:
			return 0, invalid(v, i, "after array element")
		}
	}
}

// span is one member of an object: v[at:end] from its key's opening quote
// to its value's end, the value at v[value:end], its key v[key:keyEnd]
// (the bytes between the quotes; decoded says they are its decoded key).
type span struct {
	at, key, keyEnd, value, end int
	decoded                     bool
}

// members validates the object at v[at] and returns where it ends,
// calling each (when not nil) with each of its members in order.
func members(v []byte, at, depth int, each func(span)) (int, error) {
	if depth > maxDepth {
		return 0, errDepth
	}
	i := skipSpace(v, at+1)
	if i < len(v) && v[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(v) {
			return 0, errEnd
		}
		if v[i] != '"' {
			return 0, invalid(v, i, "looking for the beginning of an object key string")
		}
		s, err := scanString(v, i)
		if err != nil {
			return 0, err
		}
		m := span{at: i, key: i + 1, keyEnd: s.end - 1, decoded: s.decoded}
		i = skipSpace(v, s.end)
		if i >= len(v) {
			return 0, errEnd
		}
		if v[i] != ':' {
			return 0, invalid(v, i, "after object key")
		}
		m.value = skipSpace(v, i+1)
		if m.end, err = skip(v, m.value, depth); err != nil {
			return 0, err
		}
		if each != nil {
			each(m)
		}
		i = skipSpace(v, m.end)
		switch {
		case i >= len(v):
			return 0, errEnd
		case v[i] == ',':
			i = skipSpace(v, i+1)
		case v[i] == '}':
			return i + 1, nil
		default:
			return 0, invalid(v, i, "after object key:value pair")
		}
	}
}

// CutMember validates obj, one JSON object with nothing but white space
// around it, and cuts from it the member that encoding/json would decode
// into a struct field named name: the last whose decoded key equals name
// but for case (encoding/json's match). value is that member's value, a
// slice of obj (not a copy); rest is obj without every member so named,
// the others as they were. found is false, and rest obj itself, when no
// member has the name. null, which encoding/json decodes into a struct as
// nothing, is an object without members here.
func CutMember(obj []byte, name string) (rest, value []byte, found bool, err error) {
	start := skipSpace(obj, 0)
	if start >= len(obj) {
		return nil, nil, false, errEnd
	}
	if bytes.HasPrefix(obj[start:], []byte("null")) && skipSpace(obj, start+4) == len(obj) {
		return obj, nil, false, nil
	}
	if obj[start] != '{' {
		return nil, nil, false, invalid(obj, start, "looking for the beginning of an object")
	}
	var kept []span
	var key []byte
	end, err := members(obj, start, 1, func(m span) {
		k := obj[m.key:m.keyEnd]
		if !m.decoded {
			key = appendUnquoted(key[:0], obj[m.key-1:m.keyEnd+1])
			k = key
		}
		if bytes.EqualFold(k, []byte(name)) {
			value, found = obj[m.value:m.end], true
			return
		}
		kept = append(kept, m)
	})
	if err != nil {
		return nil, nil, false, err
	}
	if i := skipSpace(obj, end); i < len(obj) {
		return nil, nil, false, fmt.Errorf("rawjson: trailing data after the JSON object at offset %d (%q): one JSON object was expected", i, obj[i])
	}
	if !found {
		return obj, nil, false, nil
	}
	size := 2
	for _, m := range kept {
		size += m.end - m.at + 1
	}
	rest = make([]byte, 0, size)
	rest = append(rest, '{')
	for j, m := range kept {
		if j > 0 {
			rest = append(rest, ',')
		}
		rest = append(rest, obj[m.at:m.end]...)
	}
	return append(rest, '}'), value, true, nil
}
