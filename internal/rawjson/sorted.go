package rawjson

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
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
// goes"; BenchmarkRequestHash in queue/ingress: 136 ms against 22 with
// this, its SHA-256 included).
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
