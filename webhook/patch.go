package webhook

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// baselineResponse answers with Patch, the old differ (BenchmarkAdmit/baseline).
func baselineResponse(from, to *corev1.Pod) (admission.Response, error) {
	patch, err := Patch(from, to)
	if err != nil || patch == nil {
		return admission.Response{}, err
	}
	pt := admissionv1.PatchTypeJSONPatch
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt}}, nil
}

// Patch is the JSON patch from one Pod to another, nil when they are equal.
// Both sides are encoded from the same Go types, so fields this webhook's
// API version does not know are never removed.
//
// The operations are those jsonpatch.CreatePatch yields for the two
// encoded Pods, but only the parts that differ are encoded and diffed: a
// mutation touches a few fields of a large object, and encoding and
// decoding the whole Pod twice dominated the admission latency.
func Patch(from, to *corev1.Pod) ([]byte, error) {
	if from.TypeMeta != to.TypeMeta || !reflect.DeepEqual(&from.Status, &to.Status) {
		// Never the webhook's own doing; the whole-object diff is exact.
		return wholePatch(from, to)
	}
	d := differ{}
	d.fields("/metadata", reflect.ValueOf(&from.ObjectMeta).Elem(), reflect.ValueOf(&to.ObjectMeta).Elem())
	d.fields("/spec", reflect.ValueOf(&from.Spec).Elem(), reflect.ValueOf(&to.Spec).Elem())
	if d.err != nil {
		return nil, d.err
	}
	return encodeOps(d.ops)
}

// wholePatch diffs the two encoded Pods.
func wholePatch(from, to *corev1.Pod) ([]byte, error) {
	a, err := json.Marshal(from)
	if err != nil {
		return nil, fmt.Errorf("encoding the Pod: %w", err)
	}
	b, err := json.Marshal(to)
	if err != nil {
		return nil, fmt.Errorf("encoding the mutated Pod: %w", err)
	}
	ops, err := jsonpatch.CreatePatch(a, b)
	if err != nil {
		return nil, fmt.Errorf("computing the patch: %w", err)
	}
	d := differ{ops: make([]op, 0, len(ops))}
	for _, o := range ops {
		d.ops = append(d.ops, d.generic(o, ""))
	}
	if d.err != nil {
		return nil, d.err
	}
	return encodeOps(d.ops)
}

// encodeOps encodes ops as json.Marshal encodes the equivalent
// []jsonpatch.Operation.
func encodeOps(ops []op) ([]byte, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	n := 2
	for _, o := range ops {
		n += len(o.path) + len(o.value) + 40
	}
	buf := make([]byte, 0, n)
	buf = append(buf, '[')
	for i, o := range ops {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"op":`...)
		buf = appendString(buf, o.op)
		buf = append(buf, `,"path":`...)
		buf = appendString(buf, o.path)
		if o.value != nil {
			buf = append(buf, `,"value":`...)
			buf = append(buf, o.value...)
		}
		buf = append(buf, '}')
	}
	return append(buf, ']'), nil
}

// appendString appends s as encoding/json encodes it.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always encodes
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// appendCanonical appends the first JSON value of src (compact, as
// json.Marshal writes it) as encoding/json re-encodes it after decoding it
// into an any: object keys sorted, numbers through float64. It returns the
// rest of src.
func appendCanonical(dst, src []byte) ([]byte, []byte, error) {
	if len(src) == 0 {
		return nil, nil, errors.New("unexpected end of JSON")
	}
	switch c := src[0]; {
	case c == '{':
		return appendObject(dst, src[1:])
	case c == '[':
		src = src[1:]
		dst = append(dst, '[')
		if len(src) > 0 && src[0] == ']' {
			return append(dst, ']'), src[1:], nil
		}
		for {
			var err error
			if dst, src, err = appendCanonical(dst, src); err != nil {
				return nil, nil, err
			}
			if len(src) == 0 {
				return nil, nil, errors.New("unterminated JSON array")
			}
			dst = append(dst, src[0])
			if src[0] == ']' {
				return dst, src[1:], nil
			}
			src = src[1:]
		}
	case c == '"':
		end := stringEnd(src)
		if end < 0 {
			return nil, nil, errors.New("unterminated JSON string")
		}
		if bytes.IndexByte(src[:end], '\\') < 0 {
			return append(dst, src[:end]...), src[end:], nil
		}
		// An escape may not survive a round trip byte for byte (an
		// invalid UTF-8 byte becomes U+FFFD): take encoding/json's word.
		var s string
		if err := json.Unmarshal(src[:end], &s); err != nil {
			return nil, nil, err
		}
		return appendString(dst, s), src[end:], nil
	case c == 't' || c == 'f' || c == 'n':
		end := 4
		if c == 'f' {
			end = 5
		}
		if len(src) < end {
			return nil, nil, errors.New("truncated JSON literal")
		}
		return append(dst, src[:end]...), src[end:], nil
	default:
		end := 0
		for end < len(src) && strings.IndexByte("+-0123456789.eE", src[end]) >= 0 {
			end++
		}
		num := src[:end]
		if simpleInt(num) {
			return append(dst, num...), src[end:], nil
		}
		var f float64
		if err := json.Unmarshal(num, &f); err != nil {
			return nil, nil, err
		}
		b, err := json.Marshal(f)
		if err != nil {
			return nil, nil, err
		}
		return append(dst, b...), src[end:], nil
	}
}

// simpleInt reports an integer that a float64 holds exactly and encodes
// the same way.
func simpleInt(num []byte) bool {
	digits := num
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 15 || (digits[0] == '0' && len(digits) > 1) || string(num) == "-0" {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// stringEnd is the length of the JSON string at the start of src.
func stringEnd(src []byte) int {
	for i := 1; i < len(src); i++ {
		switch src[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// member is one encoded "key":value of an object being re-encoded.
type member struct {
	key        []byte // decoded, the sort key
	start, end int    // the member's bytes in the output
}

// appendObject re-encodes an object's members in place, then reorders them
// by key. json.Marshal never writes a key twice, so none is dropped.
func appendObject(dst, src []byte) ([]byte, []byte, error) {
	if len(src) > 0 && src[0] == '}' {
		return append(dst, '{', '}'), src[1:], nil
	}
	dst = append(dst, '{')
	base := len(dst)
	var arr [24]member
	members := arr[:0]
	sorted := true
	for {
		end := stringEnd(src)
		if end < 0 {
			return nil, nil, errors.New("bad JSON object key")
		}
		m := member{start: len(dst)}
		raw := src[:end]
		if bytes.IndexByte(raw, '\\') < 0 {
			m.key = raw[1 : end-1]
			dst = append(dst, raw...)
		} else {
			var k string
			if err := json.Unmarshal(raw, &k); err != nil {
				return nil, nil, err
			}
			m.key = []byte(k)
			dst = appendString(dst, k)
		}
		src = src[end:]
		if len(src) == 0 || src[0] != ':' {
			return nil, nil, errors.New("bad JSON object")
		}
		dst = append(dst, ':')
		var err error
		if dst, src, err = appendCanonical(dst, src[1:]); err != nil {
			return nil, nil, err
		}
		m.end = len(dst)
		if n := len(members); n > 0 && bytes.Compare(members[n-1].key, m.key) > 0 {
			sorted = false
		}
		members = append(members, m)
		if len(src) == 0 {
			return nil, nil, errors.New("unterminated JSON object")
		}
		if src[0] == '}' {
			src = src[1:]
			break
		}
		if src[0] != ',' {
			return nil, nil, errors.New("bad JSON object")
		}
		dst = append(dst, ',')
		src = src[1:]
	}
	if !sorted {
		body := slices.Clone(dst[base:])
		slices.SortFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
		dst = dst[:base]
		for i, m := range members {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, body[m.start-base:m.end-base]...)
		}
	}
	return append(dst, '}'), src, nil
}

// jsonField is a struct field as encoding/json encodes it.
type jsonField struct {
	index     int
	name      string
	omitEmpty bool
}

// fieldTables are the structs diffed field by field: the ones a mutation
// changes in part. Built once; every other type is diffed as one value.
var fieldTables = func() map[reflect.Type][]jsonField {
	out := map[reflect.Type][]jsonField{}
	for _, t := range []reflect.Type{
		reflect.TypeFor[metav1.ObjectMeta](), reflect.TypeFor[corev1.PodSpec](),
		reflect.TypeFor[corev1.Container](), reflect.TypeFor[corev1.ResourceRequirements](),
	} {
		if fs, ok := structFields(t); ok {
			out[t] = fs
		}
	}
	return out
}()

// structFields lists t's JSON fields; false when t uses an encoding
// feature the field-wise diff does not model (embedded fields, omitzero,
// ",string", custom marshalling, untagged fields).
func structFields(t reflect.Type) ([]jsonField, bool) {
	if customJSON(t) {
		return nil, false
	}
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag, ok := f.Tag.Lookup("json")
		if !ok || f.Anonymous {
			return nil, false
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" && opts == "" {
			continue
		}
		if name == "" || strings.ContainsAny(name, "~/\"\\") {
			return nil, false
		}
		omit := false
		for o := range strings.SplitSeq(opts, ",") {
			switch o {
			case "":
			case "omitempty":
				omit = true
			default:
				return nil, false
			}
		}
		out = append(out, jsonField{index: i, name: name, omitEmpty: omit})
	}
	return out, true
}

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

func customJSON(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Implements(marshalerType) || p.Implements(marshalerType) ||
		t.Implements(textMarshalerType) || p.Implements(textMarshalerType)
}

// op is one patch operation; value is its JSON exactly as encoding/json
// encodes the generic value jsonpatch.CreatePatch would hold (objects with
// sorted keys), nil for none.
type op struct {
	op, path string
	value    []byte
}

// differ collects the operations jsonpatch.CreatePatch would emit for the
// encodings of two values, walking the Go values and encoding only those
// parts that differ.
type differ struct {
	ops []op
	err error
}

// fields diffs two addressable structs of a type in fieldTables, which
// encode as JSON objects.
func (d *differ) fields(path string, a, b reflect.Value) {
	fs, ok := fieldTables[a.Type()]
	if !ok {
		d.value(path, a, b)
		return
	}
	for _, f := range fs {
		fa, fb := a.Field(f.index), b.Field(f.index)
		if reflect.DeepEqual(fa.Addr().Interface(), fb.Addr().Interface()) {
			continue
		}
		p := path + "/" + f.name
		emptyA, emptyB := f.omitEmpty && isEmptyValue(fa), f.omitEmpty && isEmptyValue(fb)
		switch {
		case emptyA && emptyB:
		case emptyB:
			d.ops = append(d.ops, op{op: "remove", path: p})
		case emptyA:
			d.ops = append(d.ops, op{op: "add", path: p, value: d.canonical(fb)})
		default:
			d.value(p, fa, fb)
		}
	}
}

// value diffs two addressable values present on both sides.
func (d *differ) value(path string, a, b reflect.Value) {
	switch {
	case a.Kind() == reflect.Struct && fieldTables[a.Type()] != nil:
		d.fields(path, a, b)
		return
	case a.Kind() == reflect.Pointer && !a.IsNil() && !b.IsNil() && fieldTables[a.Type().Elem()] != nil && !customJSON(a.Type()):
		d.fields(path, a.Elem(), b.Elem())
		return
	case a.Kind() == reflect.Slice && a.Len() > 0 && b.Len() > 0 && !customJSON(a.Type()):
		// Both encode as arrays: CreatePatch removes the surplus from
		// the end, adds the new tail, then diffs the common elements.
		n := min(a.Len(), b.Len())
		for i := a.Len() - 1; i >= n; i-- {
			d.ops = append(d.ops, op{op: "remove", path: path + "/" + strconv.Itoa(i)})
		}
		for i := n; i < b.Len(); i++ {
			d.ops = append(d.ops, op{op: "add", path: path + "/" + strconv.Itoa(i), value: d.canonical(b.Index(i))})
		}
		for i := range n {
			ea, eb := a.Index(i), b.Index(i)
			if reflect.DeepEqual(ea.Addr().Interface(), eb.Addr().Interface()) {
				continue
			}
			d.value(path+"/"+strconv.Itoa(i), ea, eb)
		}
		return
	}
	ja, err := json.Marshal(a.Addr().Interface())
	if err != nil {
		d.fail(path, err)
		return
	}
	jb, err := json.Marshal(b.Addr().Interface())
	if err != nil {
		d.fail(path, err)
		return
	}
	if bytes.Equal(ja, jb) {
		return
	}
	ops, err := jsonpatch.CreatePatch(ja, jb)
	if err != nil {
		d.fail(path, err)
		return
	}
	for _, o := range ops {
		d.ops = append(d.ops, d.generic(o, path))
	}
}

// canonical is v's encoding as CreatePatch's value: encoded, decoded
// into the generic JSON types and encoded again.
func (d *differ) canonical(v reflect.Value) []byte {
	j, err := json.Marshal(v.Addr().Interface())
	if err != nil {
		d.fail("", err)
		return []byte("null")
	}
	out, _, err := appendCanonical(make([]byte, 0, len(j)), j)
	if err != nil {
		d.fail("", err)
		return []byte("null")
	}
	return out
}

// generic converts an operation of jsonpatch.CreatePatch on a part of the
// Pod at path.
func (d *differ) generic(o jsonpatch.Operation, path string) op {
	out := op{op: o.Operation, path: path + o.Path}
	if o.Value != nil || o.Operation == "add" || o.Operation == "replace" {
		b, err := json.Marshal(o.Value)
		if err != nil {
			d.fail(out.path, err)
		}
		out.value = b
	}
	return out
}

func (d *differ) fail(path string, err error) {
	if d.err == nil {
		d.err = fmt.Errorf("computing the patch at %q: %w", path, err)
	}
}

// isEmptyValue is encoding/json's omitempty test.
func isEmptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64,
		reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}
