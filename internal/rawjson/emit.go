package rawjson

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
)

// emitter is the second pass: it writes the form of v by the index.
type emitter struct {
	v        []byte
	ix       *index
	w        *bufio.Writer
	buf      bytes.Buffer // a string json.HTMLEscape writes
	unquoted []byte       // a string appendUnquoted decodes
}

// write hands p to the bufio.Writer, which keeps the first error of w
// for Flush to return. A long p (a base64 body) goes to w in one piece,
// not a buffer's worth of it copied first.
func (e *emitter) write(p []byte) {
	if len(p) > e.w.Available() && len(p) >= e.w.Size() {
		_ = e.w.Flush()
	}
	_, _ = e.w.Write(p)
}

// value writes the form of the (validated) value at v[i] and returns
// where it ends.
func (e *emitter) value(i int) (int, error) {
	v := e.v
	switch v[i] {
	case '{':
		return e.object(i)
	case '[':
		return e.array(i)
	case '"':
		return e.string(i)
	}
	end, err := scalar(v, i)
	if err != nil {
		return 0, err
	}
	e.write(v[i:end])
	return end, nil
}

func (e *emitter) array(i int) (int, error) {
	v := e.v
	_ = e.w.WriteByte('[')
	i = skipSpace(v, i+1)
	if v[i] == ']' {
		_ = e.w.WriteByte(']')
		return i + 1, nil
	}
	for {
		end, err := e.value(i)
		if err != nil {
			return 0, err
		}
		i = skipSpace(v, end)
		_ = e.w.WriteByte(v[i]) // , or ]
		if v[i] == ']' {
			return i + 1, nil
		}
		i = skipSpace(v, i+1)
	}
}

func (e *emitter) object(i int) (int, error) {
	objs := e.ix.objects
	k, found := slices.BinarySearchFunc(objs, uint32(i), func(o object, at uint32) int { return cmp.Compare(o.at, at) })
	if !found {
		// Plain: written as it is, its end found once more (the index
		// keeps no entry for it, and no emitter meets it twice).
		end, err := skipObject(e.v, i)
		if err != nil {
			return 0, err
		}
		e.write(e.v[i:end])
		return end, nil
	}
	o := objs[k]
	_ = e.w.WriteByte('{')
	for j, m := range e.ix.kept[o.first : o.first+o.n] {
		if j > 0 {
			_ = e.w.WriteByte(',')
		}
		if _, err := e.string(int(m.keyAt)); err != nil {
			return 0, err
		}
		_ = e.w.WriteByte(':')
		if m.plain {
			e.write(e.v[m.at:m.end])
		} else if _, err := e.value(int(m.at)); err != nil {
			return 0, err
		}
	}
	_ = e.w.WriteByte('}')
	return int(o.end), nil
}

// skipObject returns where the (validated) object at v[i] ends: at the
// bracket that closes it, strings skipped.
func skipObject(v []byte, i int) (int, error) {
	depth := 0
	for ; i < len(v); i++ {
		switch v[i] {
		case '"':
			s, err := scanString(v, i)
			if err != nil {
				return 0, err
			}
			i = s.end - 1
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return i + 1, nil
			}
		}
	}
	return 0, errEnd
}

// string writes the string at v[i]: as it is when json.Marshal would. A
// string json.Marshal changes only by its HTML escapes (< > & U+2028
// U+2029) is written by json.HTMLEscape, whose escapes are json.Marshal's:
// a json.Unmarshal and json.Marshal each cost twice the old decode's CPU
// on 10 MiB of ["<","<",...]. A string with escapes or invalid UTF-8 is
// decoded as encoding/json decodes it (appendUnquoted), then written the
// same way unless its value holds " \ or a control character, which only
// json.Marshal escapes as json.Marshal does.
func (e *emitter) string(i int) (int, error) {
	s, err := scanString(e.v, i)
	if err != nil {
		return 0, err
	}
	raw := e.v[i:s.end]
	switch {
	case s.plain:
		e.write(raw)
		return s.end, nil
	case s.decoded:
		e.writeHTMLEscaped(raw[1 : len(raw)-1])
		return s.end, nil
	}
	e.unquoted = appendUnquoted(e.unquoted[:0], raw)
	if !slices.ContainsFunc(e.unquoted, func(c byte) bool { return c < ' ' || c == '"' || c == '\\' }) {
		e.writeHTMLEscaped(e.unquoted)
		return s.end, nil
	}
	b, err := json.Marshal(string(e.unquoted))
	if err != nil {
		return 0, fmt.Errorf("rawjson: string at offset %d: %w", i, err)
	}
	e.write(b)
	return s.end, nil
}

// writeHTMLEscaped writes the string whose value is p (valid UTF-8, none
// of " \ or a control character) quoted, with json.HTMLEscape's escapes.
func (e *emitter) writeHTMLEscaped(p []byte) {
	e.buf.Reset()
	e.buf.WriteByte('"')
	json.HTMLEscape(&e.buf, p)
	e.buf.WriteByte('"')
	e.write(e.buf.Bytes())
}
