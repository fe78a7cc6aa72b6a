package rawjson

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"unicode/utf8"
)

// WriteSorted writes the JSON value v to w as json.Marshal writes it once
// decoded into an any with UseNumber — a form that two encodings of one
// value share (a request's hash is over it): no white space, object keys
// sorted by their decoded bytes and the last of a repeated key kept (a
// map's), numbers as written, strings as encoding/json escapes them
// (<, >, &, U+2028, U+2029; invalid UTF-8 and lone surrogates become
// U+FFFD). Invalid JSON, anything after the value but white space, and
// nesting deeper than encoding/json's 10,000 are refused.
//
// No `any` tree is made: a first pass validates v and notes, for each
// object that is not already as written, its members by decoded key; a
// second writes, copying every value that needs no change as it is (a
// 10 MiB base64 string is scanned once and goes to w in one piece). A
// string that does need a change goes through encoding/json (decoded and
// encoded again, one string at a time), so strings cannot differ from its
// form; hand-written is only the structure: no maintained library writes
// encoding/json's map order over raw bytes, and the decode and encode
// cost ~110 ms of a 10 MiB call (queue/README.md, "Where a call's CPU
// goes").
func WriteSorted(w io.Writer, v []byte) error {
	var ix index
	start := skipSpace(v, 0)
	end, plain, err := ix.value(v, start, 0)
	if err != nil {
		return err
	}
	if i := skipSpace(v, end); i < len(v) {
		return fmt.Errorf("rawjson: invalid character %q after the value at offset %d", v[i], i)
	}
	bw := bufio.NewWriterSize(w, 32<<10)
	e := emitter{v: v, ix: &ix, w: bw}
	if plain {
		e.write(v[start:end])
	} else if _, err := e.value(start); err != nil {
		return err
	}
	return bw.Flush()
}

// maxDepth is encoding/json's limit on nesting (its scanner's
// maxNestingDepth): a deeper value is refused there, so here too.
const maxDepth = 10000

// index is what the first pass learns of v's objects.
type index struct {
	objects []object // in the order they open, so by at
	chunk   []member // where the next closed object's members go (keep)
	open    []member // the members of the objects being read
}

// object is one object of v.
type object struct {
	at, end int      // v[at:end] is the object
	plain   bool     // v[at:end] is already as json.Marshal writes it
	members []member // not plain: its members
}

// member is one member of an object, in the order of the form: sorted by
// key, one per key.
type member struct {
	key     []byte // decoded
	keyAt   int    // offset of the key's opening quote
	at, end int    // v[at:end] is the value
	plain   bool   // v[at:end] is already as json.Marshal writes it
}

func (ix *index) value(v []byte, i, depth int) (end int, plain bool, err error) {
	if i >= len(v) {
		return 0, false, errEnd
	}
	switch v[i] {
	case '{':
		return ix.object(v, i, depth+1)
	case '[':
		return ix.array(v, i, depth+1)
	case '"':
		s, err := scanString(v, i)
		return s.end, s.plain, err
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

func (ix *index) array(v []byte, at, depth int) (end int, plain bool, err error) {
	if depth > maxDepth {
		return 0, false, errDepth
	}
	plain = true
	i := skipSpace(v, at+1)
	if i < len(v) && v[i] == ']' {
		return i + 1, i == at+1, nil
	}
	for {
		start := i
		end, elemPlain, err := ix.value(v, i, depth)
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

func (ix *index) object(v []byte, at, depth int) (end int, plain bool, err error) {
	if depth > maxDepth {
		return 0, false, errDepth
	}
	k := len(ix.objects)
	ix.objects = append(ix.objects, object{at: at})
	base := len(ix.open)
	i := skipSpace(v, at+1)
	plain = i == at+1
	if i < len(v) && v[i] == '}' {
		ix.objects[k].end, ix.objects[k].plain = i+1, plain
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
		m := member{keyAt: i, key: v[i+1 : s.end-1]}
		if !s.decoded {
			// Rare (escapes, invalid UTF-8): encoding/json decodes it,
			// as it decoded the old form's map keys.
			var key string
			if err := json.Unmarshal(v[i:s.end], &key); err != nil {
				return 0, false, fmt.Errorf("rawjson: object key at offset %d: %w", i, err)
			}
			m.key = []byte(key)
		}
		plain = plain && s.plain && (len(ix.open) == base || bytes.Compare(ix.open[len(ix.open)-1].key, m.key) < 0)
		i = skipSpace(v, s.end)
		if i >= len(v) || v[i] != ':' {
			if i >= len(v) {
				return 0, false, errEnd
			}
			return 0, false, invalid(v, i, "after object key")
		}
		m.at = skipSpace(v, i+1)
		plain = plain && i == s.end && m.at == i+1
		if m.end, m.plain, err = ix.value(v, m.at, depth); err != nil {
			return 0, false, err
		}
		ix.open = append(ix.open, m)
		i = skipSpace(v, m.end)
		plain = plain && m.plain && i == m.end
		switch {
		case i >= len(v):
			return 0, false, errEnd
		case v[i] == ',':
			next := skipSpace(v, i+1)
			plain = plain && next == i+1
			i = next
		case v[i] == '}':
			ix.close(k, base, i+1, plain)
			return i + 1, plain, nil
		default:
			return 0, false, invalid(v, i, "after object key:value pair")
		}
	}
}

// close ends object k, whose members are open[base:]: a plain one is
// written as it is, so its members are dropped; the others' are sorted
// by key (then by place, so the last of a key is last) and kept one per
// key, the last — a map's.
func (ix *index) close(k, base, end int, plain bool) {
	o := &ix.objects[k]
	o.end, o.plain = end, plain
	if !plain {
		ms := ix.open[base:]
		slices.SortFunc(ms, func(a, b member) int {
			return cmp.Or(bytes.Compare(a.key, b.key), cmp.Compare(a.at, b.at))
		})
		n := 0
		for j, m := range ms {
			if j+1 == len(ms) || !bytes.Equal(m.key, ms[j+1].key) {
				ms[n] = m
				n++
			}
		}
		o.members = ix.keep(ms[:n])
	}
	clear(ix.open[base:]) // the keys may hold decoded copies
	ix.open = ix.open[:base]
}

// keep copies a closed object's members out of the open ones into chunks
// that double up to 4,096 members: one slice that grew with them copied
// them ~4 times over (Go grows a long slice by a quarter).
func (ix *index) keep(ms []member) []member {
	if cap(ix.chunk)-len(ix.chunk) < len(ms) {
		ix.chunk = make([]member, 0, max(len(ms), min(2*cap(ix.chunk), 4096), 16))
	}
	start := len(ix.chunk)
	ix.chunk = append(ix.chunk, ms...)
	return ix.chunk[start:len(ix.chunk):len(ix.chunk)]
}

// scanned is what scanString learns of a string.
type scanned struct {
	end     int  // offset after its closing quote
	decoded bool // its bytes between the quotes are its decoded value: no escape, valid UTF-8
	plain   bool // and json.Marshal writes it as it is: none of < > & U+2028 U+2029 either
}

// scanString reads the string at v[i] ('"'), as encoding/json's scanner
// does: no control character, only its escapes.
func scanString(v []byte, i int) (scanned, error) {
	s := scanned{decoded: true, plain: true}
	for j := i + 1; j < len(v); {
		j = asIsRun(v, j)
		if j >= len(v) {
			break
		}
		c := v[j]
		if c < utf8.RuneSelf {
			if asIs[c] {
				j++
				continue
			}
			switch {
			case c == '"':
				s.end = j + 1
				return s, nil
			case c == '\\':
				s.decoded, s.plain = false, false
				n, err := escape(v, j)
				if err != nil {
					return s, err
				}
				j += n
			case c < ' ':
				return s, invalid(v, j, "in string literal")
			default: // < > &
				s.plain = false
				j++
			}
			continue
		}
		r, size := utf8.DecodeRune(v[j:])
		switch {
		case r == utf8.RuneError && size == 1:
			s.decoded, s.plain = false, false
		case r == '\u2028' || r == '\u2029':
			s.plain = false
		}
		j += size
	}
	return s, errEnd
}

// asIsRun skips from v[j] the 8-byte words that are all asIs ASCII,
// testing a word at once (the usual bit tricks for "has a byte less than
// n" and "has a zero byte"): a base64 body is most of a payload, and
// byte by byte its scan cost twice its SHA-256 (10 MiB: 17 ms against
// 8–9; a word at a time 8 ms, BenchmarkRequestHash in queue/ingress).
func asIsRun(v []byte, j int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	hasZero := func(x uint64) uint64 { return (x - ones) & ^x & highs }
	for ; j+8 <= len(v); j += 8 {
		x := binary.LittleEndian.Uint64(v[j:])
		if x&highs|(x-ones*' ')&^x&highs|
			hasZero(x^(ones*'"'))|hasZero(x^(ones*'\\'))|
			hasZero(x^(ones*'<'))|hasZero(x^(ones*'>'))|hasZero(x^(ones*'&')) != 0 {
			break
		}
	}
	return j
}

// escape is the length of the escape at v[j] ('\\').
func escape(v []byte, j int) (int, error) {
	if j+1 >= len(v) {
		return 0, errEnd
	}
	switch v[j+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return 2, nil
	case 'u':
		for k := j + 2; k < j+6; k++ {
			if k >= len(v) {
				return 0, errEnd
			}
			if !isHex(v[k]) {
				return 0, invalid(v, k, "in \\u hexadecimal character escape")
			}
		}
		return 6, nil
	default:
		return 0, invalid(v, j+1, "in string escape code")
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// scanNumber reads the number at v[i] by JSON's grammar, which is
// encoding/json's: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(v []byte, i int) (int, error) {
	if v[i] == '-' {
		i++
	}
	switch {
	case i < len(v) && v[i] == '0':
		i++
	case i < len(v) && '1' <= v[i] && v[i] <= '9':
		i = digits(v, i)
	case i >= len(v):
		return 0, errEnd
	default:
		return 0, invalid(v, i, "in numeric literal")
	}
	if i < len(v) && v[i] == '.' {
		if j := digits(v, i+1); j > i+1 {
			i = j
		} else if j >= len(v) {
			return 0, errEnd
		} else {
			return 0, invalid(v, j, "after decimal point in numeric literal")
		}
	}
	if i < len(v) && (v[i] == 'e' || v[i] == 'E') {
		i++
		if i < len(v) && (v[i] == '+' || v[i] == '-') {
			i++
		}
		if j := digits(v, i); j > i {
			i = j
		} else if j >= len(v) {
			return 0, errEnd
		} else {
			return 0, invalid(v, j, "in exponent of numeric literal")
		}
	}
	return i, nil
}

func digits(v []byte, i int) int {
	for i < len(v) && '0' <= v[i] && v[i] <= '9' {
		i++
	}
	return i
}

func skipSpace(v []byte, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r') {
		i++
	}
	return i
}

var errEnd = errors.New("rawjson: unexpected end of JSON input")

var errDepth = fmt.Errorf("rawjson: nesting deeper than %d", maxDepth)

func invalid(v []byte, i int, where string) error {
	return fmt.Errorf("rawjson: invalid character %q %s at offset %d", v[i], where, i)
}

// asIs is the ASCII json.Marshal writes in a string as it is: not a
// control character, ", \, <, > or &.
var asIs = func() (t [utf8.RuneSelf]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		t[c] = !bytes.ContainsRune([]byte(`"\<>&`), c)
	}
	return t
}()

// emitter is the second pass: it writes the form of v by the index.
type emitter struct {
	v  []byte
	ix *index
	w  *bufio.Writer
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
	k, found := slices.BinarySearchFunc(objs, i, func(o object, at int) int { return cmp.Compare(o.at, at) })
	if !found {
		return 0, fmt.Errorf("rawjson: no object at offset %d", i) // a bug of the index
	}
	o := objs[k]
	if o.plain {
		e.write(e.v[o.at:o.end])
		return o.end, nil
	}
	_ = e.w.WriteByte('{')
	for j, m := range o.members {
		if j > 0 {
			_ = e.w.WriteByte(',')
		}
		if _, err := e.string(m.keyAt); err != nil {
			return 0, err
		}
		_ = e.w.WriteByte(':')
		if m.plain {
			e.write(e.v[m.at:m.end])
		} else if _, err := e.value(m.at); err != nil {
			return 0, err
		}
	}
	_ = e.w.WriteByte('}')
	return o.end, nil
}

// string writes the string at v[i]: as it is when json.Marshal would,
// else as encoding/json decodes and encodes it.
func (e *emitter) string(i int) (int, error) {
	s, err := scanString(e.v, i)
	if err != nil {
		return 0, err
	}
	raw := e.v[i:s.end]
	if s.plain {
		e.write(raw)
		return s.end, nil
	}
	var str string
	if err := json.Unmarshal(raw, &str); err != nil {
		return 0, fmt.Errorf("rawjson: string at offset %d: %w", i, err)
	}
	b, err := json.Marshal(str)
	if err != nil {
		return 0, fmt.Errorf("rawjson: string at offset %d: %w", i, err)
	}
	e.write(b)
	return s.end, nil
}
