package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/extender/ledger"
)

// Paths of the extender verbs, relative to the scheduler config's urlPrefix.
const (
	FilterPath     = "/filter"
	PrioritizePath = "/prioritize"
	BindPath       = "/bind"
)

// maxBody bounds a request: 5,000 nodes' names fit in well under 1 MiB,
// full Node objects (nodeCacheCapable false) need more.
const maxBody = 64 << 20

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func badRequest(w http.ResponseWriter, format string, args ...any) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf(format, args...)})
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method " + r.Method + " not allowed; use POST"})
		return false
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(v); err != nil {
		badRequest(w, "decoding request body: %v", err)
		return false
	}
	return true
}

// request turns a Pod into a ledger request using the catalog: a GPU Pod of
// an unknown spec is an error naming the label and the known specs.
func (e *Extender) request(pod *corev1.Pod) (ledger.Request, error) {
	required := false
	if spec, ok := pod.Labels[api.LabelGPUSpec]; ok {
		s, err := e.catalog.Catalog().Lookup(api.LabelGPUSpec, spec)
		if err != nil {
			return ledger.Request{}, err
		}
		required = s.Stock == catalog.StockRequired
	}
	return ledger.RequestFor(pod, required), nil
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
	if s.body.Cap() > maxPooled {
		return // one huge request should not pin its buffer
	}
	s.body.Reset()
	clear(s.names)
	s.names, s.out = s.names[:0], s.out[:0]
	e.scratch.Put(s)
}

// maxPooled bounds the request buffer kept for reuse: 5,000 names are
// about 60 KiB, full Node objects are not worth keeping.
const maxPooled = 4 << 20

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
		badRequest(w, "reading request body: %v", err)
		return nil, false
	}
	body := s.body.Bytes()
	out := &args{}
	pod, nodes, names, parsed, ok := splitArgs(body, s.names[:0])
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
			badRequest(w, "decoding request body: %v", err)
			return nil, false
		}
		out.pod, out.nodes, names = wire.Pod, wire.Nodes, wire.NodeNames
	}
	if parsed != nil && ok {
		out.names, out.plain = parsed, true
	} else if len(names) > 0 && string(names) != "null" {
		var err error
		if s.names, out.plain, err = parseNames(names, s.names[:0]); err != nil {
			badRequest(w, "field NodeNames: %v", err)
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
		badRequest(w, "field Pod: required")
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
func splitArgs(body []byte, dst [][]byte) (pod, nodes, names []byte, parsed [][]byte, ok bool) {
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
		if n < 0 || !plainName(b[i+1:i+1+n]) {
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
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	return j, j > i
}

// skipString returns the end of the JSON string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, bool) {
	i++
	for {
		j := bytes.IndexAny(b[i:], `"\`)
		if j < 0 {
			return 0, false
		}
		i += j
		if b[i] == '"' {
			return i + 1, true
		}
		i += 2 // an escape: skip the escaped byte
		if i > len(b) {
			return 0, false
		}
	}
}

// parseNames reads a JSON array of strings into names (slices of raw).
// plain says every name is printable ASCII without escapes, as node names
// (DNS subdomains) are; otherwise encoding/json decodes the array.
func parseNames(raw []byte, names [][]byte) (_ [][]byte, plain bool, _ error) {
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
		if !plainName(name) {
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

// plainName reports whether a name can be written between quotes as is.
func plainName(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func (e *Extender) step(name string, began time.Time) {
	e.metrics.steps.WithLabelValues(name).Observe(time.Since(began).Seconds())
}

func (e *Extender) observe(o prometheus.Observer, began time.Time) {
	o.Observe(time.Since(began).Seconds())
}

func (e *Extender) handleFilter(w http.ResponseWriter, r *http.Request) {
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
	s.out = appendFilterResult(s.out[:0], args.names, args.plain, reasons)
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
func appendFilterResult(buf []byte, names [][]byte, plain bool, reasons []string) []byte {
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
func appendPriorities(buf []byte, names [][]byte, plain bool, scores []int64) []byte {
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

func (e *Extender) handlePrioritize(w http.ResponseWriter, r *http.Request) {
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
	s.out = appendPriorities(s.out[:0], args.names, args.plain, scores)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.out)
}

// Bind failure reasons (label values of runplane_extender_bind_failures_total).
const (
	reasonNotLeader  = "not_leader"
	reasonPod        = "pod_lookup"
	reasonSpec       = "unknown_spec"
	reasonNoRoom     = "no_room"
	reasonInProgress = "in_progress"
	reasonAnnotate   = "claim_annotate"
	reasonDelete     = "claim_delete"
	reasonGone       = "claim_timeout"
	reasonBinding    = "binding"
)

type bindError struct {
	reason string
	err    error
}

func (b *bindError) Error() string { return b.err.Error() }
func (b *bindError) Unwrap() error { return b.err }

func (e *Extender) handleBind(w http.ResponseWriter, r *http.Request) {
	defer e.observe(e.metrics.bindLatency, time.Now())
	var args extenderv1.ExtenderBindingArgs
	if !decode(w, r, &args) {
		return
	}
	if args.PodName == "" || args.PodNamespace == "" || args.Node == "" {
		badRequest(w, "fields PodName, PodNamespace and Node are required")
		return
	}
	err := e.bind(r.Context(), &args)
	out := extenderv1.ExtenderBindingResult{}
	if err != nil {
		reason := reasonBinding
		var be *bindError
		if errors.As(err, &be) {
			reason = be.reason
		}
		e.metrics.bindFailures.WithLabelValues(reason).Inc()
		e.log.Info("bind failed", "pod", args.PodNamespace+"/"+args.PodName, "node", args.Node, "reason", reason, "err", err)
		out.Error = err.Error()
	} else {
		e.metrics.binds.Inc()
	}
	writeJSON(w, http.StatusOK, &out)
}

func (e *Extender) pod(ctx context.Context, ns, name string, uid types.UID) (*corev1.Pod, error) {
	pod, err := e.podLister.Pods(ns).Get(name)
	if err != nil || (uid != "" && pod.UID != uid) {
		// The informer may lag a just-created Pod.
		if pod, err = e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("getting Pod %s/%s: %w", ns, name, err)
		}
	}
	if uid != "" && pod.UID != uid {
		return nil, fmt.Errorf("pod %s/%s has UID %s, the scheduler asked for %s", ns, name, pod.UID, uid)
	}
	return pod, nil
}

// bind claims a placeholder when the node needs one, then creates the
// Binding. Whatever fails releases what BeginBind assumed.
func (e *Extender) bind(ctx context.Context, args *extenderv1.ExtenderBindingArgs) error {
	if !e.isLeader() {
		return &bindError{reasonNotLeader, errors.New("this runplane extender replica is not the leader; retry")}
	}
	pod, err := e.pod(ctx, args.PodNamespace, args.PodName, args.PodUID)
	if err != nil {
		return &bindError{reasonPod, err}
	}
	req, err := e.request(pod)
	if err != nil {
		return &bindError{reasonSpec, err}
	}
	ph, err := e.ledger.BeginBind(req, args.Node)
	defer e.intents.forget(pod.UID)
	if err != nil {
		if errors.Is(err, ledger.ErrBindInProgress) {
			return &bindError{reasonInProgress, err}
		}
		return &bindError{reasonNoRoom, err}
	}
	phDeleted := false
	ok := false
	defer func() { e.ledger.EndBind(pod.UID, ok, phDeleted) }()
	if ph != nil {
		claimCtx, cancel := context.WithTimeout(ctx, e.cfg.ClaimTimeout)
		defer cancel()
		if phDeleted, err = e.claim(claimCtx, pod, ph); err != nil {
			return err
		}
	}
	defer e.step("binding", time.Now())
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: args.Node},
	}
	// The Binding's annotations land on the Pod with its node: the claim
	// annotation then reports what this bind took.
	if ph != nil {
		binding.Annotations = map[string]string{api.AnnotationClaimedStock: ph.String()}
	} else if v, ok := pod.Annotations[api.AnnotationClaimedStock]; ok && v != "" && !e.inherited(pod, v, args.Node) {
		// An intent for a claim that did not happen: "" says none.
		binding.Annotations = map[string]string{api.AnnotationClaimedStock: ""}
	}
	if err := e.client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		return &bindError{reasonBinding, fmt.Errorf("binding Pod %s/%s to node %s: %w", pod.Namespace, pod.Name, args.Node, err)}
	}
	ok = true
	return nil
}

// inherited reports whether a claim annotation names a placeholder on node
// that is gone and whose claim this Pod inherited from a predecessor that
// deleted it for this Pod: this bind takes its capacity, so the record stays.
func (e *Extender) inherited(pod *corev1.Pod, annotation, node string) bool {
	c, err := ledger.ParseClaim(annotation)
	return err == nil && c.Node == node && !e.ledger.Exists(c.UID) && e.ledger.Inherits(pod.UID) == c.UID
}

// claim records the claim on the Pod (so a successor extender keeps it),
// deletes the placeholder with a UID precondition and no grace period, and
// waits until the informer has seen it go, so the ledger agrees with the
// node before the Binding exists.
func (e *Extender) claim(ctx context.Context, pod *corev1.Pod, ph *ledger.Placeholder) (deleted bool, err error) {
	began := time.Now()
	// Usually the filter already recorded this claim while the scheduler
	// finished its cycle; otherwise record it now. Either way the record is
	// durable before the placeholder is deleted.
	if !e.intents.wait(ctx, pod.UID, *ph) {
		if err := annotateClaim(ctx, e.client, pod, *ph); err != nil {
			return false, &bindError{reasonAnnotate, err}
		}
	}
	e.step("claim_annotate", began)
	began = time.Now()
	grace := int64(0)
	uid := ph.UID
	opts := &metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}}
	obj, err := e.client.CoreV1().RESTClient().Delete().Namespace(ph.Namespace).Resource("pods").Name(ph.Name).
		Body(opts).Do(ctx).Get()
	e.step("claim_delete", began)
	switch {
	case err == nil:
		e.metrics.claims.WithLabelValues(ph.Spec).Inc()
		// With grace period 0 and no finalizers the API server removes the
		// Pod from storage before it answers: it is gone now, and waiting
		// for the watch would only add latency to every takeover. A Pod
		// that still has finalizers is gone only once the watch says so.
		if p, ok := obj.(*corev1.Pod); !ok || len(p.Finalizers) == 0 {
			return true, nil
		}
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Gone already (NotFound), or the name now holds a newer Pod
		// (Conflict on the UID precondition): either way that placeholder's
		// capacity is no longer held.
	default:
		return false, &bindError{reasonDelete, fmt.Errorf("deleting placeholder %s/%s: %w", ph.Namespace, ph.Name, err)}
	}
	defer e.step("claim_wait", time.Now())
	if err := e.ledger.WaitGone(ctx, ph.UID); err != nil {
		return true, &bindError{reasonGone, err}
	}
	return true, nil
}
