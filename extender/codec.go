package extender

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// The filter and prioritize wire format is the extenderv1 types; this file
// only makes their JSON cheap at the scale of a scheduling cycle (5,000
// node names in). In one run of
//
//	go test ./extender -run '^$' -bench FilterPrioritize -benchtime 1000x -count 5 -benchmem
//
// (2026-11-23, before the filter answered one node) encoding/json on the
// v1 types (sub-benchmark baseline) took p99 9.07 ms thread CPU per cycle
// and 10,233 allocs, this file 4.86 ms and 181 allocs. decodeArgs and the
// append functions equal encoding/json on every input (FuzzDecodeArgs,
// FuzzEncode).

// decodeArgs decodes body into args exactly as json.Unmarshal does. The
// shape kube-scheduler sends (an object of distinct, plainly spelled
// members, NodeNames an array of escape-free ASCII names) is split without
// reflection: only the Pod (and Nodes) go through encoding/json, and the
// node names are substrings of one copy of their array.
func decodeArgs(body []byte, args *extenderv1.ExtenderArgs) error {
	var r argsReader
	return r.decode(body, args, decodeMode{})
}

// decodeMode says what of a request is decoded at once.
type decodeMode struct {
	// lazyNames: a plain NodeNames array is not split (args.NodeNames
	// stays nil; raw, starts and ends hold it) until splitNames is called.
	lazyNames bool
	// podMeta: args.Pod holds only the Pod's name, namespace, UID and
	// labels, and the rest of the Pod's JSON is not checked. A filter acts
	// on the API server's copy of the Pod: the whole Pod, decoded only to
	// be replaced, was most of what a filter allocated once the node names
	// were not copied.
	podMeta bool
}

// argsReader decodes ExtenderArgs; one per pooled buffer, so the slices of
// node names are reused from call to call.
type argsReader struct {
	names []string
	// raw is the NodeNames array as sent when it is a plain one (escape-free
	// ASCII strings), else nil.
	raw []byte
	// starts and ends are where each name of raw begins and ends within
	// it: plainStrings notes them as it checks the array, so splitting it
	// is not a second pass over its bytes.
	starts, ends []int32
	// nameBytes are the names of raw as slices of it (see bytesOfNames).
	nameBytes [][]byte
	// meta is args.Pod when only its metadata is decoded (podMeta).
	meta corev1.Pod
}

// decode decodes body into args as json.Unmarshal does, but for what mode
// defers.
func (r *argsReader) decode(body []byte, args *extenderv1.ExtenderArgs, mode decodeMode) error {
	r.reset()
	*args = extenderv1.ExtenderArgs{}
	if r.fast(body, args, mode) {
		return nil
	}
	r.reset()
	*args = extenderv1.ExtenderArgs{}
	return json.Unmarshal(body, args)
}

// reset readies the reader for the next call.
func (r *argsReader) reset() {
	r.names, r.raw, r.starts, r.ends, r.nameBytes = r.names[:0], nil, r.starts[:0], r.ends[:0], r.nameBytes[:0]
}

func (r *argsReader) fast(body []byte, args *extenderv1.ExtenderArgs, mode decodeMode) bool {
	pod, nodes, names, plainArray, ok := r.splitArgs(body)
	if !ok {
		return false
	}
	if pod != nil && !r.decodePod(pod, args, mode.podMeta) {
		return false
	}
	if nodes != nil && json.Unmarshal(nodes, &args.Nodes) != nil {
		return false
	}
	if names == nil || string(names) == "null" {
		return true
	}
	if plainArray {
		r.raw = names
		if !mode.lazyNames {
			r.splitNames(args)
		}
		return true
	}
	return json.Unmarshal(names, &args.NodeNames) == nil
}

// podMeta is what a meta decode reads of a Pod: the members of
// corev1.Pod's that encoding/json would set, under the same names.
type podMeta struct {
	Metadata struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		UID       types.UID         `json:"uid"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
}

// decodePod decodes the Pod's JSON into args.Pod: whole, or (meta) only
// its name, namespace, UID and labels, into r.meta.
func (r *argsReader) decodePod(pod []byte, args *extenderv1.ExtenderArgs, meta bool) bool {
	if !meta || string(pod) == "null" {
		return json.Unmarshal(pod, &args.Pod) == nil
	}
	var m podMeta
	if json.Unmarshal(pod, &m) != nil {
		return false
	}
	md := &m.Metadata
	r.meta = corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: md.Name, Namespace: md.Namespace, UID: md.UID, Labels: md.Labels}}
	args.Pod = &r.meta
	return true
}

// bytesOfNames returns the names of the plain array raw as slices of it:
// what a filter looks its nodes up by, without copying them.
func (r *argsReader) bytesOfNames() [][]byte {
	list := r.nameBytes[:0]
	for k, end := range r.ends {
		list = append(list, r.raw[r.starts[k]:end])
	}
	r.nameBytes = list
	return list
}

// splitNames sets args.NodeNames to the names of the plain array raw, as
// substrings of one copy of it, cut where splitArgs found them.
func (r *argsReader) splitNames(args *extenderv1.ExtenderArgs) {
	s := string(r.raw)
	list := r.names[:0]
	if list == nil {
		list = make([]string, 0, len(r.ends))
	}
	for k, end := range r.ends {
		list = append(list, s[r.starts[k]:end])
	}
	r.names = list
	args.NodeNames = &list
}

// splitArgs finds the members of an ExtenderArgs object without decoding
// them; each is nil when absent. ok is false for anything but an object of
// distinct, plainly spelled (ASCII, escape-free) members; an unknown member
// is skipped, as encoding/json does, once it is valid JSON. plainArray:
// names is an array of plain strings.
func (r *argsReader) splitArgs(body []byte) (pod, nodes, names []byte, plainArray, ok bool) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, nil, nil, false, false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return nil, nil, nil, false, skipSpace(body, i+1) == len(body)
	}
	for {
		if i >= len(body) || body[i] != '"' {
			return nil, nil, nil, false, false
		}
		end := bytes.IndexByte(body[i+1:], '"')
		if end < 0 || !plain(body[i+1:i+1+end]) {
			// Escapes and non-ASCII keys (encoding/json folds some) go
			// the slow way.
			return nil, nil, nil, false, false
		}
		key := body[i+1 : i+1+end]
		i = skipSpace(body, i+2+end)
		if i >= len(body) || body[i] != ':' {
			return nil, nil, nil, false, false
		}
		i = skipSpace(body, i+1)
		// encoding/json matches member names case-insensitively.
		isNames := bytes.EqualFold(key, []byte("NodeNames"))
		j, plainNames := 0, false
		if isNames {
			// The node names are read once here, not skipped and then read.
			r.starts, r.ends = r.starts[:0], r.ends[:0]
			j, plainNames = r.plainStrings(body, i)
		}
		if !plainNames {
			if j, ok = skipValue(body, i); !ok {
				return nil, nil, nil, false, false
			}
		}
		val := body[i:j]
		var dst *[]byte
		switch {
		case bytes.EqualFold(key, []byte("Pod")):
			dst = &pod
		case bytes.EqualFold(key, []byte("Nodes")):
			dst = &nodes
		case isNames:
			dst = &names
			plainArray = plainNames
		case !json.Valid(val):
			return nil, nil, nil, false, false
		}
		if dst != nil {
			if *dst != nil {
				return nil, nil, nil, false, false // a duplicate: encoding/json merges
			}
			*dst = val
		}
		i = skipSpace(body, j)
		if i < len(body) && body[i] == ',' {
			i = skipSpace(body, i+1)
			continue
		}
		if i < len(body) && body[i] == '}' && skipSpace(body, i+1) == len(body) {
			return pod, nodes, names, plainArray, true
		}
		return nil, nil, nil, false, false
	}
}

// plainStrings returns the end of the JSON array of plain strings (see
// plain) starting at b[i]; ok is false for anything else. One pass: each
// byte of a name is looked at once, and where each name begins and ends
// (relative to b[i]) is noted in r.starts and r.ends. Bodies over 2 GiB
// are not plain arrays: maxBody is far below.
func (r *argsReader) plainStrings(b []byte, i int) (end int, ok bool) {
	if i >= len(b) || b[i] != '[' || len(b) > math.MaxInt32 {
		return 0, false
	}
	from := i
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, false
		}
		start := i + 1
		// One unsigned comparison catches the control bytes and the
		// non-ASCII ones; the quote ends the name, a backslash is not
		// plain. (This loop is 60 KB per 5,000-node request.)
		for i = start; i < len(b); i++ {
			if c := b[i]; c-0x20 >= 0x60 || c == '"' || c == '\\' {
				break
			}
		}
		if i >= len(b) || b[i] != '"' {
			return 0, false
		}
		r.starts, r.ends = append(r.starts, int32(start-from)), append(r.ends, int32(i-from))
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, true
		}
		if i >= len(b) || b[i] != ',' {
			return 0, false
		}
		i = skipSpace(b, i+1)
	}
}

// skipValue returns the end of the JSON value starting at i. It only finds
// the extent; whoever reads the value validates it.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				end, ok := skipString(b, i)
				if !ok {
					return 0, false
				}
				i = end
				continue
			case '{', '[':
				depth++
				if depth > maxFastDepth {
					// encoding/json limits nesting counted from the whole
					// body; it decides what is too deep.
					return 0, false
				}
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return 0, false
	}
	j := i
	for j < len(b) && strings.IndexByte(",}] \t\n\r", b[j]) < 0 {
		j++
	}
	return j, j > i
}

// maxFastDepth is far beyond any Pod's nesting and far below encoding/json's
// limit of 10,000, so the fast path never accepts a body json.Unmarshal
// refuses as too deep.
const maxFastDepth = 1000

// skipString returns the end of the JSON string starting at b[i] == '"'.
// IndexByte finds the next quote; only when a backslash comes before it is
// the stretch read again, from just after the escape (linear: each
// stretch is searched for backslashes once).
func skipString(b []byte, i int) (int, bool) {
	i++
	for {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return 0, false
		}
		q += i
		for {
			k := bytes.IndexByte(b[i:q], '\\')
			if k < 0 {
				return q + 1, true
			}
			i += k + 2 // an escape: skip the escaped byte
			if i > q {
				break // the quote was escaped; look for the next one
			}
		}
		if i > len(b) {
			return 0, false
		}
	}
}

// plain reports whether a string can be written between quotes as is, and
// reads back as itself: printable ASCII without quote or backslash.
func plain[S ~string | ~[]byte](s S) bool {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

func skipSpace[S ~string | ~[]byte](s S, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

func appendString(buf []byte, s string) []byte {
	if plain(s) {
		buf = append(buf, '"')
		buf = append(buf, s...)
		return append(buf, '"')
	}
	b, _ := json.Marshal(s)
	return append(buf, b...)
}

// appendName appends a node name; known: the name is plain (it came in a
// plain array), so it is copied without being checked again.
func appendName(buf []byte, s string, known bool) []byte {
	if known {
		buf = append(buf, '"')
		buf = append(buf, s...)
		return append(buf, '"')
	}
	return appendString(buf, s)
}

func appendStrings(buf []byte, list *[]string, plainKnown bool) []byte {
	if list == nil || *list == nil {
		return append(buf, "null"...)
	}
	buf = append(buf, '[')
	for i, s := range *list {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendName(buf, s, plainKnown)
	}
	return append(buf, ']')
}

// appendFailed encodes a FailedNodesMap in its iteration order (the keys
// are not sorted as json.Marshal sorts them; they decode the same). Few
// distinct reasons (the ledger shares their strings) on many nodes: each
// is quoted once. A key that is not plain goes to json.Marshal with the
// whole map: two keys of invalid UTF-8 can encode alike, and which one
// wins then depends on the order.
func appendFailed(buf []byte, m extenderv1.FailedNodesMap) []byte {
	if m == nil {
		return append(buf, "null"...)
	}
	from := len(buf)
	buf = append(buf, '{')
	var last string
	var quoted []byte
	first := true
	for node, reason := range m {
		if !plain(node) {
			b, _ := json.Marshal(m) // a map of strings always encodes
			return append(buf[:from], b...)
		}
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = appendName(buf, node, true)
		buf = append(buf, ':')
		if quoted == nil || reason != last {
			quoted, last = appendString(quoted[:0], reason), reason
		}
		buf = append(buf, quoted...)
	}
	return append(buf, '}')
}

// appendFilterResult appends an ExtenderFilterResult as JSON. plainNames:
// the node names are known to be plain (see appendName).
func appendFilterResult(buf []byte, r *extenderv1.ExtenderFilterResult, plainNames bool) []byte {
	nodes, _ := json.Marshal(r.Nodes) // a NodeList always encodes
	buf = append(append(buf, `{"Nodes":`...), nodes...)
	buf = append(buf, `,"NodeNames":`...)
	buf = appendStrings(buf, r.NodeNames, plainNames)
	buf = append(buf, `,"FailedNodes":`...)
	buf = appendFailed(buf, r.FailedNodes)
	buf = append(buf, `,"FailedAndUnresolvableNodes":`...)
	buf = appendFailed(buf, r.FailedAndUnresolvableNodes)
	buf = append(buf, `,"Error":`...)
	buf = appendString(buf, r.Error)
	return append(buf, "}\n"...)
}

// appendPriorities appends, as the JSON of a HostPriorityList, the hosts
// with their scores (scores[i] is hosts[i]'s; none: 0); plainHosts as
// appendName's known. The scores come straight from the ledger: a list of
// 5,000 HostPriority values built only to be encoded cost more than the
// encoding.
func appendPriorities(buf []byte, hosts []string, scores []int64, plainHosts bool) []byte {
	buf = append(buf, '[')
	for i, host := range hosts {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"Host":`...)
		buf = appendName(buf, host, plainHosts)
		buf = append(buf, `,"Score":`...)
		switch s := at(scores, i); {
		case 0 <= s && s <= 9: // the usual scores, one digit
			buf = append(buf, byte('0'+s))
		default:
			buf = strconv.AppendInt(buf, s, 10)
		}
		buf = append(buf, '}')
	}
	return append(buf, "]\n"...)
}

// at is scores[i], 0 when there are no scores.
func at(scores []int64, i int) int64 {
	if scores == nil {
		return 0
	}
	return scores[i]
}
