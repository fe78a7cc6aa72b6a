package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

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

// argsWire is ExtenderArgs with NodeNames left raw: at 5,000 nodes,
// encoding/json's per-string decoding is most of a filter call's cost, and
// node names (DNS subdomains) never need unescaping.
type argsWire struct {
	Pod       *corev1.Pod
	Nodes     *corev1.NodeList
	NodeNames json.RawMessage
}

const nodeNamesKey = `"NodeNames":`

// splitNodeNames is the fast path for what kube-scheduler sends: Go's
// encoder writes ExtenderArgs' fields in order, so the top-level NodeNames
// array is the last member, after the last occurrence of its key (inside
// the Pod any such text is an escaped string or an annotation's string
// value, never followed by an array that closes the body). The head is
// decoded normally, the array by parseNames: the 5,000 names are scanned
// once instead of three times. ok is false when the body is not so shaped.
func splitNodeNames(body []byte) (head, names []byte, ok bool) {
	i := bytes.LastIndex(body, []byte(nodeNamesKey))
	if i < 0 {
		return nil, nil, false
	}
	tail := bytes.TrimRight(body[i+len(nodeNamesKey):], " \t\r\n")
	if !bytes.HasSuffix(tail, []byte("]}")) {
		return nil, nil, false
	}
	head = bytes.TrimRight(body[:i], " \t\r\n")
	if !bytes.HasSuffix(head, []byte(",")) {
		return nil, nil, false
	}
	head = append(head[:len(head)-1:len(head)-1], '}')
	return head, bytes.TrimSpace(tail[:len(tail)-1]), true
}

func (e *Extender) decodeArgs(w http.ResponseWriter, r *http.Request) (*extenderv1.ExtenderArgs, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "method " + r.Method + " not allowed; use POST"})
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		badRequest(w, "reading request body: %v", err)
		return nil, false
	}
	var wire argsWire
	if head, names, ok := splitNodeNames(body); ok && json.Unmarshal(head, &wire) == nil && wire.NodeNames == nil {
		wire.NodeNames = names
	} else {
		wire = argsWire{}
		if err := json.Unmarshal(body, &wire); err != nil {
			badRequest(w, "decoding request body: %v", err)
			return nil, false
		}
	}
	args := &extenderv1.ExtenderArgs{Pod: wire.Pod, Nodes: wire.Nodes}
	if len(wire.NodeNames) > 0 && string(wire.NodeNames) != "null" {
		names, err := parseNames(wire.NodeNames, e.ledger.Intern)
		if err != nil {
			badRequest(w, "field NodeNames: %v", err)
			return nil, false
		}
		args.NodeNames = &names
	}
	if args.Pod == nil {
		badRequest(w, "field Pod: required")
		return nil, false
	}
	return args, true
}

// parseNames reads a JSON array of strings, falling back to encoding/json
// when a string holds an escape. intern turns the raw names into strings
// (the ledger reuses its own node names instead of allocating 5,000).
func parseNames(raw []byte, intern func([][]byte) []string) ([]string, error) {
	names := make([][]byte, 0, bytes.Count(raw, []byte{','})+1)
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return nil, errors.New("want a JSON array of node names")
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == ']' {
		return []string{}, nil
	}
	for {
		if i >= len(raw) || raw[i] != '"' {
			return nil, errors.New("want a JSON array of node names")
		}
		end := bytes.IndexByte(raw[i+1:], '"')
		if end < 0 {
			return nil, errors.New("unterminated string in NodeNames")
		}
		name := raw[i+1 : i+1+end]
		if bytes.IndexByte(name, '\\') >= 0 {
			var slow []string
			if err := json.Unmarshal(raw, &slow); err != nil {
				return nil, err
			}
			return slow, nil
		}
		names = append(names, name)
		i = skipSpace(raw, i+2+end)
		if i < len(raw) && raw[i] == ']' {
			return intern(names), nil
		}
		if i >= len(raw) || raw[i] != ',' {
			return nil, errors.New("want a JSON array of node names")
		}
		i = skipSpace(raw, i+1)
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func nodeNames(args *extenderv1.ExtenderArgs) []string {
	if args.NodeNames != nil {
		return *args.NodeNames
	}
	if args.Nodes == nil {
		return nil
	}
	names := make([]string, len(args.Nodes.Items))
	for i := range args.Nodes.Items {
		names[i] = args.Nodes.Items[i].Name
	}
	return names
}

func (e *Extender) step(name string, began time.Time) {
	e.metrics.steps.WithLabelValues(name).Observe(time.Since(began).Seconds())
}

func (e *Extender) observe(verb string, began time.Time) {
	e.metrics.latency.WithLabelValues(verb).Observe(time.Since(began).Seconds())
}

func (e *Extender) handleFilter(w http.ResponseWriter, r *http.Request) {
	defer e.observe("filter", time.Now())
	args, ok := e.decodeArgs(w, r)
	if !ok {
		return
	}
	names := nodeNames(args)
	out := extenderv1.ExtenderFilterResult{}
	req, err := e.request(args.Pod)
	if err != nil {
		// Unresolvable on every node: the Pod's event names the bad label.
		out.FailedAndUnresolvableNodes = make(extenderv1.FailedNodesMap, len(names))
		for _, n := range names {
			out.FailedAndUnresolvableNodes[n] = err.Error()
		}
		out.NodeNames = &[]string{}
	} else {
		res := e.ledger.Filter(req, names, e.isLeader())
		if res.Claim != nil {
			e.intents.record(e.client, args.Pod, *res.Claim)
		}
		out.NodeNames = &res.Feasible
		// Unresolvable: preempting other Pods never helps here; takeover of
		// stock happens at bind, not through the scheduler's preemption.
		out.FailedAndUnresolvableNodes = res.Failed
	}
	if args.Nodes != nil {
		keep := make(map[string]bool, len(*out.NodeNames))
		for _, n := range *out.NodeNames {
			keep[n] = true
		}
		list := &corev1.NodeList{}
		for i := range args.Nodes.Items {
			if keep[args.Nodes.Items[i].Name] {
				list.Items = append(list.Items, args.Nodes.Items[i])
			}
		}
		out.Nodes, out.NodeNames = list, nil
		writeJSON(w, http.StatusOK, &out)
		return
	}
	writeFilterResult(w, *out.NodeNames, out.FailedAndUnresolvableNodes)
}

// safeName reports whether s can be written between quotes as is (node
// names are DNS subdomains; anything else goes through encoding/json).
func safeName(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

func appendString(buf []byte, s string) []byte {
	if safeName(s) {
		buf = append(buf, '"')
		buf = append(buf, s...)
		return append(buf, '"')
	}
	b, _ := json.Marshal(s)
	return append(buf, b...)
}

// writeFilterResult encodes an ExtenderFilterResult by hand: with 5,000
// node names encoding/json's reflection is a third of a filter call.
func writeFilterResult(w http.ResponseWriter, feasible []string, failed extenderv1.FailedNodesMap) {
	buf := make([]byte, 0, 64+len(feasible)*24)
	buf = append(buf, `{"NodeNames":[`...)
	for i, n := range feasible {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendString(buf, n)
	}
	buf = append(buf, `],"FailedAndUnresolvableNodes":{`...)
	quoted := map[string][]byte{} // few distinct reasons, many nodes
	i := 0
	for n, reason := range failed {
		if i > 0 {
			buf = append(buf, ',')
		}
		i++
		buf = appendString(buf, n)
		buf = append(buf, ':')
		q, ok := quoted[reason]
		if !ok {
			q, _ = json.Marshal(reason)
			quoted[reason] = q
		}
		buf = append(buf, q...)
	}
	buf = append(buf, "}}\n"...)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf)
}

func writePriorities(w http.ResponseWriter, list extenderv1.HostPriorityList) {
	buf := make([]byte, 0, 2+len(list)*40)
	buf = append(buf, '[')
	for i, p := range list {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"Host":`...)
		buf = appendString(buf, p.Host)
		buf = append(buf, `,"Score":`...)
		buf = strconv.AppendInt(buf, p.Score, 10)
		buf = append(buf, '}')
	}
	buf = append(buf, "]\n"...)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf)
}

func (e *Extender) handlePrioritize(w http.ResponseWriter, r *http.Request) {
	defer e.observe("prioritize", time.Now())
	args, ok := e.decodeArgs(w, r)
	if !ok {
		return
	}
	names := nodeNames(args)
	out := make(extenderv1.HostPriorityList, len(names))
	req, err := e.request(args.Pod)
	if err != nil {
		for i, n := range names {
			out[i] = extenderv1.HostPriority{Host: n}
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	for i, s := range e.ledger.Prioritize(req, names) {
		out[i] = extenderv1.HostPriority{Host: s.Node, Score: s.Score}
	}
	writePriorities(w, out)
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
	defer e.observe("bind", time.Now())
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
