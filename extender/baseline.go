package extender

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func badRequestBaseline(w http.ResponseWriter, format string, args ...any) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf(format, args...)})
}

// args is a decoded ExtenderArgs. With nodeCacheCapable (what the
// runplane-scheduler profile sets) the scheduler sends 5,000 node names per
// call: they stay raw slices of the request body, never strings.
type args struct {
	pod   *corev1.Pod
	nodes *corev1.NodeList
	// names are NodeNames, or the names of Nodes when NodeNames is absent.
	names [][]byte
	// plain: every name is written between quotes as is (taken from the
	// body, where it held no escape, control or non-ASCII byte).
	plain bool
}

// scratch holds one request's buffers; Extender.scratch pools them, so a
// scheduling cycle reuses the previous one's instead of allocating
// megabytes for the garbage collector.
type scratch struct {
	body    bytes.Buffer
	names   [][]byte
	reasons []string
	scores  []int64
	out     []byte
}

func (e *Extender) getScratch() *scratch {
	if s, ok := e.scratch.Get().(*scratch); ok {
		return s
	}
	return &scratch{}
}

func (e *Extender) putScratch(s *scratch) {
	if s.body.Cap() > maxPooledBaseline {
		return // one huge request should not pin its buffer
	}
	s.body.Reset()
	clear(s.names)
	s.names, s.out = s.names[:0], s.out[:0]
	e.scratch.Put(s)
}

// maxPooledBaseline bounds the request buffer kept for reuse: 5,000 names are
// about 60 KiB, full Node objects are not worth keeping.
const maxPooledBaseline = 4 << 20

func (e *Extender) decodeArgs(w http.ResponseWriter, r *http.Request, s *scratch) (*args, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method " + r.Method + " not allowed; use POST"})
		return nil, false
	}
	if r.ContentLength > 0 && r.ContentLength <= maxBody {
		s.body.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	if _, err := s.body.ReadFrom(http.MaxBytesReader(w, r.Body, maxBody)); err != nil {
		badRequestBaseline(w, "reading request body: %v", err)
		return nil, false
	}
	body := s.body.Bytes()
	out := &args{}
	pod, nodes, names, parsed, ok := splitArgsBaseline(body, s.names[:0])
	if parsed != nil {
		s.names = parsed
	}
	if ok && pod != nil {
		ok = json.Unmarshal(pod, &out.pod) == nil
	}
	if ok && nodes != nil {
		ok = json.Unmarshal(nodes, &out.nodes) == nil
	}
	if !ok {
		// Not the shape kube-scheduler sends, or not valid: encoding/json
		// decides, and its error names the problem.
		var wire struct {
			Pod       *corev1.Pod
			Nodes     *corev1.NodeList
			NodeNames json.RawMessage
		}
		if err := json.Unmarshal(body, &wire); err != nil {
			badRequestBaseline(w, "decoding request body: %v", err)
			return nil, false
		}
		out.pod, out.nodes, names = wire.Pod, wire.Nodes, wire.NodeNames
	}
	if parsed != nil && ok {
		out.names, out.plain = parsed, true
	} else if len(names) > 0 && string(names) != "null" {
		var err error
		if s.names, out.plain, err = parseNames(names, s.names[:0]); err != nil {
			badRequestBaseline(w, "field NodeNames: %v", err)
			return nil, false
		}
		out.names = s.names
	} else if out.nodes != nil {
		for i := range out.nodes.Items {
			s.names = append(s.names, []byte(out.nodes.Items[i].Name))
		}
		out.names = s.names
	}
	if out.pod == nil {
		badRequestBaseline(w, "field Pod: required")
		return nil, false
	}
	return out, true
}

// splitArgs finds the members of an ExtenderArgs object without decoding
// them, so the node names are scanned once rather than by encoding/json's
// validation, decoding and reflection. Each is nil when absent. When
// NodeNames is an array of plain names (as node names are), parsed holds
// them (appended to dst), non-nil. ok is false for anything but an object
// of distinct, plainly spelled members; the caller then leaves the body to
// encoding/json. An unknown member is skipped (as encoding/json does) once
// it is valid JSON.
func splitArgsBaseline(body []byte, dst [][]byte) (pod, nodes, names []byte, parsed [][]byte, ok bool) {
	fail := func() ([]byte, []byte, []byte, [][]byte, bool) { return nil, nil, nil, parsed, false }
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return fail()
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return nil, nil, nil, nil, skipSpace(body, i+1) == len(body)
	}
	for {
		if i >= len(body) || body[i] != '"' {
			return fail()
		}
		end := bytes.IndexByte(body[i+1:], '"')
		if end < 0 {
			return fail()
		}
		key := body[i+1 : i+1+end]
		for _, c := range key {
			// Escapes and non-ASCII keys (encoding/json folds some) go the
			// slow way.
			if c < 0x20 || c == '\\' || c >= 0x80 {
				return fail()
			}
		}
		i = skipSpace(body, i+2+end)
		if i >= len(body) || body[i] != ':' {
			return fail()
		}
		i = skipSpace(body, i+1)
		isNames := bytes.EqualFold(key, []byte("NodeNames"))
		var j int
		var p [][]byte
		plain := false
		if isNames && names == nil {
			p, j, plain = scanNames(body, i, dst)
		}
		if plain {
			parsed = p
		} else if j, ok = skipValue(body, i); !ok {
			return fail()
		}
		val := body[i:j]
		// encoding/json matches member names case-insensitively.
		switch {
		case bytes.EqualFold(key, []byte("Pod")):
			if pod != nil {
				return fail()
			}
			pod = val
		case bytes.EqualFold(key, []byte("Nodes")):
			if nodes != nil {
				return fail()
			}
			nodes = val
		case isNames:
			if names != nil {
				return fail()
			}
			names = val
		default:
			if !json.Valid(val) {
				return fail()
			}
		}
		i = skipSpace(body, j)
		if i < len(body) && body[i] == ',' {
			i = skipSpace(body, i+1)
			continue
		}
		if i < len(body) && body[i] == '}' && skipSpace(body, i+1) == len(body) {
			return pod, nodes, names, parsed, true
		}
		return fail()
	}
}

// scanNames reads a JSON array of plain names (printable ASCII, no escapes)
// starting at b[i], appending them to dst; ok is false for anything else.
func scanNames(b []byte, i int, dst [][]byte) (names [][]byte, end int, ok bool) {
	if i >= len(b) || b[i] != '[' {
		return nil, 0, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return dst, i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, 0, false
		}
		n := bytes.IndexByte(b[i+1:], '"')
		if n < 0 || !plain(b[i+1:i+1+n]) {
			return nil, 0, false
		}
		dst = append(dst, b[i+1:i+1+n])
		i = skipSpace(b, i+2+n)
		if i < len(b) && b[i] == ']' {
			return dst, i + 1, true
		}
		if i >= len(b) || b[i] != ',' {
			return nil, 0, false
		}
		i = skipSpace(b, i+1)
	}
}

// parseNames reads a JSON array of strings into names (slices of raw).
// plain says every name is printable ASCII without escapes, as node names
// (DNS subdomains) are; otherwise encoding/json decodes the array.
func parseNames(raw []byte, names [][]byte) (_ [][]byte, isPlain bool, _ error) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return names, false, errors.New("want a JSON array of node names")
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == ']' {
		return names, true, nil
	}
	for {
		if i >= len(raw) || raw[i] != '"' {
			return names, false, errors.New("want a JSON array of node names")
		}
		end := bytes.IndexByte(raw[i+1:], '"')
		if end < 0 {
			return names, false, errors.New("unterminated string in NodeNames")
		}
		name := raw[i+1 : i+1+end]
		if !plain(name) {
			var slow []string
			if err := json.Unmarshal(raw, &slow); err != nil {
				return names, false, err
			}
			names = names[:0]
			for _, n := range slow {
				names = append(names, []byte(n))
			}
			return names, false, nil
		}
		names = append(names, name)
		i = skipSpace(raw, i+2+end)
		if i < len(raw) && raw[i] == ']' {
			return names, true, nil
		}
		if i >= len(raw) || raw[i] != ',' {
			return names, false, errors.New("want a JSON array of node names")
		}
		i = skipSpace(raw, i+1)
	}
}

func (e *Extender) baselineFilter(w http.ResponseWriter, r *http.Request) {
	defer e.observe(e.metrics.filterLatency, time.Now())
	s := e.getScratch()
	defer e.putScratch(s)
	args, ok := e.decodeArgs(w, r, s)
	if !ok {
		return
	}
	s.reasons = slices.Grow(s.reasons[:0], len(args.names))[:len(args.names)]
	reasons := s.reasons
	req, err := e.request(args.pod)
	if err != nil {
		// Unresolvable on every node: the Pod's event names the bad label.
		msg := err.Error()
		for i := range reasons {
			reasons[i] = msg
		}
	} else {
		_, claim := e.ledger.FilterNodes(req, args.names, e.isLeader(), reasons)
		if claim != nil {
			e.intents.record(e.client, args.pod, *claim)
		}
	}
	// Failed nodes are unresolvable: preempting other Pods never helps
	// here; takeover of stock happens at bind, not through the scheduler's
	// preemption.
	if args.nodes != nil {
		out := extenderv1.ExtenderFilterResult{FailedAndUnresolvableNodes: extenderv1.FailedNodesMap{}}
		for i, n := range args.names {
			if reasons[i] != "" {
				out.FailedAndUnresolvableNodes[string(n)] = reasons[i]
			}
		}
		keep := make(map[string]bool, len(args.names))
		for i, n := range args.names {
			if reasons[i] == "" {
				keep[string(n)] = true
			}
		}
		list := &corev1.NodeList{}
		for i := range args.nodes.Items {
			if keep[args.nodes.Items[i].Name] {
				list.Items = append(list.Items, args.nodes.Items[i])
			}
		}
		out.Nodes = list
		writeJSON(w, http.StatusOK, &out)
		return
	}
	s.out = appendFilterResultBaseline(s.out[:0], args.names, args.plain, reasons)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.out)
}

func appendName(buf, name []byte, plain bool) []byte {
	if plain {
		buf = append(buf, '"')
		buf = append(buf, name...)
		return append(buf, '"')
	}
	b, _ := json.Marshal(string(name))
	return append(buf, b...)
}

// appendFilterResult encodes an ExtenderFilterResult by hand: with 5,000
// node names encoding/json's reflection is a third of a filter call. Node i
// is feasible when reasons[i] is "".
func appendFilterResultBaseline(buf []byte, names [][]byte, plain bool, reasons []string) []byte {
	buf = append(buf, `{"NodeNames":[`...)
	first := true
	for i, n := range names {
		if reasons[i] != "" {
			continue
		}
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = appendName(buf, n, plain)
	}
	buf = append(buf, `],"FailedAndUnresolvableNodes":{`...)
	// Few distinct reasons (the ledger shares their strings), many nodes.
	var lastReason string
	var quoted []byte
	first = true
	for i, n := range names {
		reason := reasons[i]
		if reason == "" {
			continue
		}
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = appendName(buf, n, plain)
		buf = append(buf, ':')
		if quoted == nil || reason != lastReason {
			quoted, _ = json.Marshal(reason)
			lastReason = reason
		}
		buf = append(buf, quoted...)
	}
	return append(buf, "}}\n"...)
}

// appendPriorities encodes a HostPriorityList by hand, like appendFilterResult.
func appendPrioritiesBaseline(buf []byte, names [][]byte, plain bool, scores []int64) []byte {
	buf = append(buf, '[')
	for i, n := range names {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"Host":`...)
		buf = appendName(buf, n, plain)
		buf = append(buf, `,"Score":`...)
		buf = strconv.AppendInt(buf, scores[i], 10)
		buf = append(buf, '}')
	}
	return append(buf, "]\n"...)
}

func (e *Extender) baselinePrioritize(w http.ResponseWriter, r *http.Request) {
	defer e.observe(e.metrics.prioritizeLatency, time.Now())
	s := e.getScratch()
	defer e.putScratch(s)
	args, ok := e.decodeArgs(w, r, s)
	if !ok {
		return
	}
	s.scores = slices.Grow(s.scores[:0], len(args.names))[:len(args.names)]
	scores := s.scores
	if req, err := e.request(args.pod); err != nil {
		clear(scores)
	} else {
		e.ledger.PrioritizeNodes(req, args.names, scores)
	}
	s.out = appendPrioritiesBaseline(s.out[:0], args.names, args.plain, scores)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.out)
}
