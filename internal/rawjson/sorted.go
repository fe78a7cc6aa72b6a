package rawjson

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"math"
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
// object that is not already as written, its members by decoded key (24
// bytes a member, one per key, 16 an object; nothing for an object as
// written); a second writes, copying every value that needs no change as
// it is (a 10 MiB base64 string is scanned once and goes to w in one
// piece). A string that needs only the HTML escapes goes through
// json.HTMLEscape; any other that needs a change is decoded as
// encoding/json decodes it (appendUnquoted: encoding/json decodes only
// inside Unmarshal) and encoded by json.Marshal. Hand-written are the
// structure and the escapes' decoding: no maintained library writes
// encoding/json's map order over raw bytes (FuzzWriteSorted holds the
// two equal), and the decode and encode cost ~110 ms of a 10 MiB call
// (queue/README.md, "Where a call's CPU goes"; BenchmarkRequestHash in
// queue/ingress: 136 ms against 22 with this, its SHA-256 included).
func WriteSorted(w io.Writer, v []byte) error {
	if uint64(len(v)) > math.MaxUint32 {
		return fmt.Errorf("rawjson: a value of %d bytes, more than 4 GiB", len(v))
	}
	ix := index{v: v}
	start := skipSpace(v, 0)
	end, plain, err := walk{v: v, ix: &ix}.value(start, 0)
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

// index is what the first pass learns of v's objects. An object already
// as json.Marshal writes it (plain) has no entry: the emitter writes it as
// it is, and no entry is what kept the index small on a tenant's shape —
// 48 bytes an object and 56 a member, each member held until its object
// closed, had WriteSorted allocate 190 MiB where the decode allocated 26
// for 4 MiB of {"a":0,"a":0,...}, and 321 against 231 for [{},{},...]
// (TestWriteSortedAllocatesNoMoreThanTheDecode). Offsets are 32-bit (v is
// refused past 4 GiB; a payload is at most 64 MiB).
type index struct {
	v       []byte
	objects []object // the objects that are not plain, in the order they open, so by at
	kept    []member // the members of the closed objects, each object's in a run
	open    []member // the members of the objects being read
	keys    []byte   // the decoded keys that are not their bytes in v
}

// object is one object of v that is not plain: v[at:end], its members
// kept[first:first+n].
type object struct {
	at, end, first, n uint32
}

// member is one member of an object; a closed object's are in the order
// of the form: sorted by key, one per key.
type member struct {
	keyAt       uint32 // offset of the key's opening quote
	key, keyLen uint32 // the decoded key is v[key:key+keyLen], or keys[…] when inKeys
	at, end     uint32 // v[at:end] is the value
	plain       bool   // v[at:end] is already as json.Marshal writes it
	inKeys      bool
}

// dedupeAt is the number of an open object's members at which they are
// deduplicated before it closes: a tenant's {"a":0,"a":0,...} holds one
// (the old map's one entry), not one per repetition. After a pass the
// next is at twice what it kept, so each member is sorted O(log n) times.
const dedupeAt = 1024

// The walk's notes (walk.object); begin and close do nothing on a nil
// index, the walk calls the others only with one.

// begin notes that an object opens at v[at]: its entry k, its members
// from open[base], deduplicated when limit are open.
func (ix *index) begin(at int) (k, base, limit int) {
	if ix == nil {
		return 0, 0, 0
	}
	ix.objects = append(ix.objects, object{at: uint32(at)})
	return len(ix.objects) - 1, len(ix.open), dedupeAt
}

// noteKey is the member of the key at s (small enough to inline: one call
// per member was ~30% of a body of repeated keys, BenchmarkRequestHash).
func (ix *index) noteKey(s *span) member {
	if !s.decoded {
		return ix.unquotedKey(s)
	}
	return member{keyAt: uint32(s.at), key: uint32(s.key), keyLen: uint32(s.keyEnd - s.key)}
}

// unquotedKey is the member of a key whose decoded bytes are not its own
// (escapes, invalid UTF-8): noted in keys.
func (ix *index) unquotedKey(s *span) member {
	n := len(ix.keys)
	ix.keys = appendUnquoted(ix.keys, ix.v[s.at:s.keyEnd+1])
	return member{keyAt: uint32(s.at), key: uint32(n), keyLen: uint32(len(ix.keys) - n), inKeys: true}
}

// after reports whether m's key sorts after the last open member's of the
// object whose members start at open[base] (true when it is the first).
func (ix *index) after(base int, m member) bool {
	return len(ix.open) == base || bytes.Compare(ix.key(ix.open[len(ix.open)-1]), ix.key(m)) < 0
}

// member notes m, its value at s; once limit members of the object whose
// members start at open[base] are open, and it is not plain, they are
// deduplicated, and the next limit is returned.
func (ix *index) member(m member, s *span, valuePlain, plain bool, base, limit int) int {
	m.at, m.end, m.plain = uint32(s.value), uint32(s.end), valuePlain
	ix.open = append(ix.open, m)
	if plain || len(ix.open)-base < limit {
		return limit
	}
	return ix.deduplicated(base)
}

// deduplicated deduplicates the open members from base and returns the
// next limit: twice what it kept.
func (ix *index) deduplicated(base int) int {
	n := ix.dedupe(ix.open[base:])
	ix.open = ix.open[:base+n]
	return max(dedupeAt, 2*n)
}

// close ends object k, whose members are open[base:]. A plain one is
// written as it is: its entry is dropped (the objects inside it are plain
// too, so theirs were). The others' members are kept one per key.
func (ix *index) close(k, base, end int, plain bool) {
	if ix == nil {
		return
	}
	if plain {
		ix.objects = ix.objects[:k]
	} else {
		n := ix.dedupe(ix.open[base:])
		o := &ix.objects[k]
		o.end, o.first, o.n = uint32(end), uint32(len(ix.kept)), uint32(n)
		ix.kept = append(ix.kept, ix.open[base:base+n]...)
	}
	ix.open = ix.open[:base]
}

// dedupe sorts ms by key, then by place, so the last of a key is last,
// and moves to ms[:n] one member per key, the last — a map's.
func (ix *index) dedupe(ms []member) (n int) {
	slices.SortFunc(ms, func(a, b member) int {
		return cmp.Or(bytes.Compare(ix.key(a), ix.key(b)), cmp.Compare(a.at, b.at))
	})
	for j, m := range ms {
		if j+1 == len(ms) || !bytes.Equal(ix.key(m), ix.key(ms[j+1])) {
			ms[n] = m
			n++
		}
	}
	return n
}

// key is m's decoded key.
func (ix *index) key(m member) []byte {
	if m.inKeys {
		return ix.keys[m.key : m.key+m.keyLen]
	}
	return ix.v[m.key : m.key+m.keyLen]
}
