package rawjson

import "bytes"

// walk is the one pass over JSON's grammar (encoding/json's, its depth
// limit included) that every function here makes first: Valid and
// findMember validate (ix nil); WriteSorted's first pass also notes in ix
// each object that json.Marshal would not write as it is. One walk, so the
// grammar is written once.
type walk struct {
	v  []byte
	ix *index // nil: validate only
}

// value validates the value at v[i], depth levels deep, and returns where
// it ends and whether json.Marshal writes it as it is (plain; an object's
// verdict needs ix, which keeps its keys).
func (w walk) value(i, depth int) (end int, plain bool, err error) {
	v := w.v
	if i >= len(v) {
		return 0, false, errEnd
	}
	switch v[i] {
	case '"':
		s, err := scanString(v, i)
		return s.end, s.plain, err
	case '[':
		return w.array(i, depth+1)
	case '{':
		return w.object(i, depth+1, nil)
	default:
		end, err := scalar(v, i)
		return end, true, err
	}
}

// scalar reads the number or literal at v[i] (both written as they are).
func scalar(v []byte, i int) (int, error) {
	if c := v[i]; c == '-' || '0' <= c && c <= '9' {
		return scanNumber(v, i)
	}
	for _, lit := range []string{"true", "false", "null"} {
		if bytes.HasPrefix(v[i:], []byte(lit)) {
			return i + len(lit), nil
		}
	}
	return 0, invalid(v, i, "looking for the beginning of a value")
}

func (w walk) array(at, depth int) (end int, plain bool, err error) {
	if depth > maxDepth {
		return 0, false, errDepth
	}
	v := w.v
	i := skipSpace(v, at+1)
	if i < len(v) && v[i] == ']' {
		return i + 1, i == at+1, nil
	}
	plain = true
	for {
		start := i
		end, elemPlain, err := w.value(i, depth)
		if err != nil {
			return 0, false, err
		}
		i = skipSpace(v, end)
		plain = plain && elemPlain && (start == at+1 || v[start-1] == ',') && i == end
		switch {
		case i >= len(v):
			return 0, false, errEnd
		case v[i] == ',':
			i = skipSpace(v, i+1)
		case v[i] == ']':
			return i + 1, plain, nil
		default:
			return 0, false, invalid(v, i, "after array element")
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

// object validates the object at v[at] and returns where it ends, calling
// each (when not nil) with each of its members in order; with ix, it notes
// the object there unless it is plain: no white space, its keys plain and
// sorted, one of each, its values plain.
func (w walk) object(at, depth int, each func(span)) (end int, plain bool, err error) {
	if depth > maxDepth {
		return 0, false, errDepth
	}
	v, ix := w.v, w.ix
	k, base, limit := ix.begin(at)
	i := skipSpace(v, at+1)
	plain = i == at+1
	if i < len(v) && v[i] == '}' {
		ix.close(k, base, i+1, plain)
		return i + 1, plain, nil
	}
	for {
		if i >= len(v) {
			return 0, false, errEnd
		}
		if v[i] != '"' {
			return 0, false, invalid(v, i, "looking for the beginning of an object key string")
		}
		s, err := scanString(v, i)
		if err != nil {
			return 0, false, err
		}
		m := span{at: i, key: i + 1, keyEnd: s.end - 1, decoded: s.decoded}
		var noted member
		if ix != nil {
			noted = ix.noteKey(&m)
			plain = plain && s.plain && ix.after(base, noted)
		}
		colon := skipSpace(v, s.end)
		if colon >= len(v) {
			return 0, false, errEnd
		}
		if v[colon] != ':' {
			return 0, false, invalid(v, colon, "after object key")
		}
		m.value = skipSpace(v, colon+1)
		var valuePlain bool
		if m.end, valuePlain, err = w.value(m.value, depth); err != nil {
			return 0, false, err
		}
		if each != nil {
			each(m)
		}
		i = skipSpace(v, m.end)
		plain = plain && colon == s.end && m.value == colon+1 && valuePlain && i == m.end
		if i < len(v) && v[i] == ',' {
			plain = plain && skipSpace(v, i+1) == i+1
		}
		if ix != nil {
			limit = ix.member(noted, &m, valuePlain, plain, base, limit)
		}
		switch {
		case i >= len(v):
			return 0, false, errEnd
		case v[i] == ',':
			i = skipSpace(v, i+1)
		case v[i] == '}':
			ix.close(k, base, i+1, plain)
			return i + 1, plain, nil
		default:
			return 0, false, invalid(v, i, "after object key:value pair")
		}
	}
}
