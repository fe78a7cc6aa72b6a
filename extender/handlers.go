package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
	"github.com/runplane/runplane/extender/ledger"
	"github.com/runplane/runplane/internal/httpjson"
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

// post answers anything but a POST with 405.
func post(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodPost {
		return true
	}
	w.Header().Set("Allow", http.MethodPost)
	httpjson.Error(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed; use POST")
	return false
}

// buffers are one filter or prioritize call's request and response bytes
// and slices; Extender.buffers pools them, so a scheduling cycle reuses the
// previous one's instead of allocating for the garbage collector.
type buffers struct {
	in       bytes.Buffer
	out      []byte
	args     argsReader
	feasible []string
	failed   []ledger.NodeFailure
}

// maxPooled bounds the buffers kept for reuse: 5,000 names are about 60
// KiB, full Node objects are not worth keeping.
const maxPooled = 4 << 20

func (e *Extender) getBuffers() *buffers {
	if b, ok := e.buffers.Get().(*buffers); ok {
		return b
	}
	return &buffers{}
}

func (e *Extender) putBuffers(b *buffers) {
	if b.in.Cap() > maxPooled || cap(b.out) > maxPooled {
		return // one huge request should not pin its buffers
	}
	b.in.Reset()
	b.out = b.out[:0]
	// The slices keep their last request's strings reachable until the
	// next call overwrites them (one body, under maxPooled): clearing ~300
	// KiB of pointers per call cost more than it frees.
	b.args.reset()
	b.feasible, b.failed = b.feasible[:0], b.failed[:0]
	e.buffers.Put(b)
}

// readArgs reads the ExtenderArgs of a filter or prioritize call, deferring
// what mode says.
func readArgs(w http.ResponseWriter, r *http.Request, b *buffers, mode decodeMode) (*extenderv1.ExtenderArgs, bool) {
	if !post(w, r) {
		return nil, false
	}
	if _, err := b.in.ReadFrom(http.MaxBytesReader(w, r.Body, maxBody)); err != nil {
		httpjson.Error(w, http.StatusBadRequest, "reading request body: "+err.Error())
		return nil, false
	}
	var args extenderv1.ExtenderArgs
	if err := b.args.decode(b.in.Bytes(), &args, mode); err != nil {
		httpjson.Error(w, http.StatusBadRequest, "decoding request body: "+err.Error())
		return nil, false
	}
	if args.Pod == nil {
		httpjson.Error(w, http.StatusBadRequest, "field Pod: required")
		return nil, false
	}
	return &args, true
}

// nodeNames are the NodeNames (what a nodeCacheCapable scheduler sends) or
// the names of the Nodes.
func nodeNames(args *extenderv1.ExtenderArgs) []string {
	if args.NodeNames != nil || args.Nodes == nil {
		return ptr.Deref(args.NodeNames, nil)
	}
	names := make([]string, len(args.Nodes.Items))
	for i := range args.Nodes.Items {
		names[i] = args.Nodes.Items[i].Name
	}
	return names
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
		// The catalog changed since Start checked it.
		if err := s.CheckManaged(e.cfg.ManagedResources); err != nil {
			return ledger.Request{}, err
		}
		required = s.Stock == catalog.StockRequired
	}
	req := ledger.RequestFor(pod, required)
	e.ledger.AddClaimNeeds(&req, pod)
	return req, nil
}

func (e *Extender) step(name string, began time.Time) {
	e.metrics.steps.WithLabelValues(name).Observe(time.Since(began).Seconds())
}

func (e *Extender) observe(o prometheus.Observer, began time.Time) {
	o.Observe(time.Since(began).Seconds())
}

func (e *Extender) handleFilter(w http.ResponseWriter, r *http.Request) {
	defer e.observe(e.metrics.filterLatency, time.Now())
	b := e.getBuffers()
	defer e.putBuffers(b)
	args, ok := readArgs(w, r, b, decodeMode{lazyNames: true, podMeta: true})
	if !ok || !e.checkFilterPod(w, r, args) {
		return
	}
	var out *extenderv1.ExtenderFilterResult
	into := ledger.FilterResult{Feasible: b.feasible, Failed: b.failed}
	if b.args.raw != nil {
		out, into = filterInto(e, args, b.args.bytesOfNames(), true, into)
	} else {
		out, into = filterInto(e, args, nodeNames(args), args.Nodes == nil || args.NodeNames != nil, into)
	}
	b.feasible, b.failed = into.Feasible, into.Failed // grown: reuse them next time
	// Every feasible node is a name of the request: plain when the
	// request's array was.
	b.out = appendFilterResult(b.out, out, b.args.raw != nil && args.Nodes == nil)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b.out)
}

// checkFilterPod replaces the body's Pod by the API server's, refusing
// (4xx) a Pod that does not exist, is another Pod of that name, or is not
// scheduled by runplane: filter reserves capacity and records a claim on
// the Pod, so it acts only on the Pod the scheduler is scheduling.
func (e *Extender) checkFilterPod(w http.ResponseWriter, r *http.Request, args *extenderv1.ExtenderArgs) bool {
	pod, ref := e.scheduledPod(r.Context(), args.Pod.Namespace, args.Pod.Name, args.Pod.UID)
	if ref != nil {
		e.metrics.refused.WithLabelValues("filter").Inc()
		httpjson.Error(w, ref.Status, ref.Error())
		return false
	}
	args.Pod = pod
	return true
}

func (e *Extender) handlePrioritize(w http.ResponseWriter, r *http.Request) {
	defer e.observe(e.metrics.prioritizeLatency, time.Now())
	b := e.getBuffers()
	defer e.putBuffers(b)
	args, ok := readArgs(w, r, b, decodeMode{})
	if !ok {
		return
	}
	names, scores := e.prioritizeInto(args)
	// The hosts are the request's names (or equal to them).
	b.out = appendPriorities(b.out, names, scores, b.args.raw != nil && args.Nodes == nil)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b.out)
}

// errNotLeaderPreempt is a filter's answer, as an error, for a Pod that
// fits no node and may preempt, from a replica that is not the leader.
const errNotLeaderPreempt = "this runplane extender replica is not the leader, which plans preemption; retry"

// filterInto filters the Pod on the named nodes (the leader reserves the
// best one), into's slices reused for the ledger's result, which it also
// returns; byNames: the answer names the nodes (else it lists args.Nodes).
func filterInto[N ledger.Name](e *Extender, args *extenderv1.ExtenderArgs, names []N, byNames bool, into ledger.FilterResult) (*extenderv1.ExtenderFilterResult, ledger.FilterResult) {
	var res ledger.FilterResult
	waitLeader := false
	if req, err := e.request(args.Pod); err != nil {
		// Unresolvable on every node: the Pod's event names the bad label.
		res.Feasible, res.Failed = into.Feasible[:0], into.Failed[:0]
		if res.Feasible == nil {
			res.Feasible = []string{}
		}
		for _, n := range names {
			res.Failed = append(res.Failed, ledger.NodeFailure{Node: string(n), Reason: err.Error()})
		}
	} else {
		req.Protected = e.guard.protected
		leads := e.isLeader()
		res = ledger.FilterAppend(e.ledger, into, req, names, leads)
		waitLeader = !leads && len(res.Feasible) == 0 && req.MayPreempt()
		if res.Claim != nil && !res.Claim.Reservation {
			// (A reservation is released after the Binding, which records
			// the claim: nothing to record ahead.)
			e.intents.record(e.client, args.Pod, *res.Claim)
		}
		if res.Preemption != nil {
			e.enqueuePreemption(args.Pod, res.Preemption)
		}
		if res.Capped != "" {
			e.recordCapped(args.Pod, res.Capped)
		}
	}
	out := &extenderv1.ExtenderFilterResult{}
	if p := res.Preemption; p != nil {
		// The Pod waits for its victims (or terminating Pods) on p.Node.
		// Answered as unschedulable it would rely on the victims' deletion
		// to be requeued, and a requeue that reaches this extender before
		// its informer has applied that deletion is answered "waiting"
		// again — then parked with no later event on a quiet node. As an
		// error the scheduler retries it after its back-off (1–10 s); each
		// retry renews the nomination, nothing more.
		out.Error = "node " + p.Node + ": " + p.Reason()
		return out, res
	}
	if waitLeader {
		// Only the leader plans preemption. Answered as unschedulable, the
		// Pod would wait in kube-scheduler's unschedulable queue for a
		// cluster event or its 5-minute flush — past a new leader's start,
		// and past the NominationTTL of a reservation a dead leader left
		// for it (issue 31: TestReservationSurvivesRestart). An error makes
		// the scheduler retry the Pod after its back-off (1–10 s).
		out.Error = errNotLeaderPreempt
		return out, res
	}
	if res.Chosen != "" {
		// The leader answers with the node it reserved alone. The
		// scheduler would pick it anyway (it scores ledger.ReservedScore,
		// which with the extender's weight beats every other node's
		// extender and in-tree scores together); the other feasible nodes
		// would only be scored by every in-tree plugin, and their names
		// encoded and decoded twice. That was most of a runplane-scheduler
		// cycle at 1,000 nodes (BenchmarkBindThroughput: the scheduler's
		// cycles, one at a time, were the burst's bound). The failed nodes
		// are left out too: kube-scheduler reads why a node failed only
		// when no node is feasible, and in a full cluster they were most of
		// the answer (4,500 reasons, 400 KB; BenchmarkFilterPrioritizeShapes).
		// Should that node fail later in the cycle (a Reserve or PreBind
		// plugin), the next cycle filters every node again and, nothing
		// else having changed, reserves the same node: as before, when its
		// score of ReservedScore outweighed all others.
		res.Feasible = append(res.Feasible[:0], res.Chosen)
	} else {
		// Failed nodes are unresolvable: takeover of stock happens at bind,
		// and preemption by priority is planned by the ledger and run by
		// the extender (preempt.go says why not by kube-scheduler's
		// preemption).
		out.FailedAndUnresolvableNodes = res.Reasons()
	}
	if byNames {
		feasible := res.Feasible
		out.NodeNames = &feasible
		return out, res
	}
	out.Nodes = &corev1.NodeList{}
	for _, n := range args.Nodes.Items {
		_, failed := out.FailedAndUnresolvableNodes[n.Name]
		if (res.Chosen == "" && !failed) || n.Name == res.Chosen {
			out.Nodes.Items = append(out.Nodes.Items, n)
		}
	}
	return out, res
}

// prioritizeInto is prioritize answering the hosts and their scores (nil:
// 0 everywhere).
func (e *Extender) prioritizeInto(args *extenderv1.ExtenderArgs) (names []string, scores []int64) {
	names = nodeNames(args)
	req, err := e.request(args.Pod)
	if err != nil {
		return names, nil
	}
	return names, e.ledger.Prioritize(req, names)
}

// Bind failure reasons (label values of runplane_extender_bind_failures_total).
const (
	reasonNotLeader  = "not_leader"
	reasonSpec       = "unknown_spec"
	reasonNoRoom     = "no_room"
	reasonInProgress = "in_progress"
	reasonAnnotate   = "claim_annotate"
	reasonDelete     = "claim_delete"
	reasonGone       = "claim_timeout"
	reasonBinding    = "binding"
)

// bindFailureReasons are every reason, each started at 0 (newMetrics): the
// first failure is then an increase, and the dashboard shows 0, not no data.
func bindFailureReasons() []string {
	return []string{reasonNotLeader, reasonSpec, reasonNoRoom, reasonInProgress, reasonAnnotate, reasonDelete, reasonGone, reasonBinding}
}

type bindError struct {
	reason string
	err    error
}

func (b *bindError) Error() string { return b.err.Error() }
func (b *bindError) Unwrap() error { return b.err }

func (e *Extender) handleBind(w http.ResponseWriter, r *http.Request) {
	defer e.observe(e.metrics.bindLatency, time.Now())
	var args extenderv1.ExtenderBindingArgs
	if !post(w, r) {
		return
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&args); err != nil {
		httpjson.Error(w, http.StatusBadRequest, "decoding request body: "+err.Error())
		return
	}
	if args.PodName == "" || args.PodNamespace == "" || args.PodUID == "" || args.Node == "" {
		httpjson.Error(w, http.StatusBadRequest, "fields PodName, PodNamespace, PodUID and Node are required")
		return
	}
	// Bind only the Pod the scheduler is scheduling: one that exists with
	// that UID and runplane's schedulerName.
	pod, ref := e.scheduledPod(r.Context(), args.PodNamespace, args.PodName, args.PodUID)
	if ref != nil {
		e.metrics.refused.WithLabelValues("bind").Inc()
		e.log.Info("bind refused", "pod", args.PodNamespace+"/"+args.PodName, "node", args.Node, "status", ref.Status, "err", ref.Error())
		httpjson.Error(w, ref.Status, ref.Error())
		return
	}
	err := e.bind(r.Context(), pod, args.Node)
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
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&out)
}

// deletePod deletes a Pod and returns what the API server answered: the
// Pod as it was removed, or as it still is (finalizers). The typed client's
// Delete drops that answer, so this goes through the REST client.
func deletePod(c kubernetes.Interface) func(context.Context, string, string, *metav1.DeleteOptions) (runtime.Object, error) {
	return func(ctx context.Context, ns, name string, opts *metav1.DeleteOptions) (runtime.Object, error) {
		return c.CoreV1().RESTClient().Delete().Namespace(ns).Resource("pods").Name(name).Body(opts).Do(ctx).Get()
	}
}

// errUIDMismatch: the Pod of that name is another Pod than the one asked for.
var errUIDMismatch = errors.New("UID mismatch")

func isUIDMismatch(err error) bool { return errors.Is(err, errUIDMismatch) }

func (e *Extender) pod(ctx context.Context, ns, name string, uid types.UID) (*corev1.Pod, error) {
	pod, err := e.podLister.Pods(ns).Get(name)
	if err != nil || (uid != "" && pod.UID != uid) {
		// The informer may lag a just-created Pod.
		if pod, err = e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("getting Pod %s/%s: %w", ns, name, err)
		}
	}
	if uid != "" && pod.UID != uid {
		return nil, fmt.Errorf("pod %s/%s has UID %s, the scheduler asked for %s: %w", ns, name, pod.UID, uid, errUIDMismatch)
	}
	return pod, nil
}

// bind claims a placeholder when node needs one, then creates pod's
// Binding (pod: the one scheduledPod found for the request). Whatever fails
// releases what BeginBind assumed.
func (e *Extender) bind(ctx context.Context, pod *corev1.Pod, node string) error {
	if err := e.leading(); err != nil {
		return err
	}
	req, err := e.request(pod)
	if err != nil {
		return &bindError{reasonSpec, err}
	}
	ph, err := e.ledger.BeginBind(req, node)
	defer e.intents.forget(pod.UID)
	if err != nil {
		if errors.Is(err, ledger.ErrBindInProgress) {
			return &bindError{reasonInProgress, err}
		}
		return &bindError{reasonNoRoom, err}
	}
	phDeleted, took := false, false
	ok := false
	defer func() { e.ledger.EndBind(pod.UID, ok, phDeleted) }()
	claimCtx, cancel := context.WithTimeout(ctx, e.cfg.ClaimTimeout.Duration)
	defer cancel()
	if ph != nil && !ph.Reservation {
		if phDeleted, took, err = e.claim(claimCtx, pod, ph); err != nil {
			return err
		}
	}
	// A reservation is released after the Binding, not before: until then
	// every scheduler counts it (a kubelet does not: reservations.go).
	took = took || ph != nil && ph.Reservation
	// No claim annotation this process started for the Pod (an intent of
	// an earlier reservation, superseded or not) may land after the
	// Binding: the Binding's annotation below is the last word.
	intended, err := e.intents.settle(claimCtx, pod.UID)
	if err != nil {
		return &bindError{reasonAnnotate, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)}
	}
	// Leadership may have moved while this bind waited for the claim: a
	// new leader's ledger already counts what this one assumed.
	if err := e.leading(); err != nil {
		return err
	}
	defer e.step("binding", time.Now())
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	// The Binding's annotations land on the Pod with its node: the claim
	// annotation then reports what this bind took, whatever intent or
	// predecessor's claim the Pod carries (the informer's copy may lag).
	if v, ok := e.claimRecord(pod, ph, took, intended, node); ok {
		binding.Annotations = map[string]string{api.AnnotationClaimedStock: v}
	}
	if err := e.client.CoreV1().Pods(pod.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		return &bindError{reasonBinding, fmt.Errorf("binding Pod %s/%s to node %s: %w", pod.Namespace, pod.Name, node, err)}
	}
	ok = true
	if ph != nil && ph.Reservation {
		phDeleted = true // its room is the bound Pod's now
		if err := e.releaseReservation(ctx, *ph); err != nil {
			// The ledger finds it stale (its Pod is bound) and retries.
			e.log.Info("releasing reservation", "pod", ph.Namespace+"/"+ph.Name, "err", err)
		}
	}
	return nil
}

// leading is nil while this replica binds, else the not-leader error; bind
// checks it before each step that changes the cluster.
func (e *Extender) leading() error {
	if !e.isLeader() {
		return &bindError{reasonNotLeader, errors.New("this runplane extender replica is not the leader; retry")}
	}
	return nil
}

// claimRecord is the claim annotation a Pod's Binding carries, ok false
// when it needs none: the placeholder this bind deleted; else the claim
// the Pod inherited from a predecessor that deleted the placeholder for it
// (the ledger checks nobody else claimed it since); else "" (none) if the
// Pod may carry a claim annotation — an intent this process started, a
// placeholder this bind found already gone, or an annotation the informer
// shows. Exactly one bound Pod names a placeholder.
func (e *Extender) claimRecord(pod *corev1.Pod, ph *ledger.Placeholder, took, intended bool, node string) (string, bool) {
	if took {
		return ph.String(), true
	}
	if c, ok := e.ledger.Inherited(pod.UID, node); ok {
		return c.String(), true
	}
	if ph != nil || intended || pod.Annotations[api.AnnotationClaimedStock] != "" {
		return "", true
	}
	return "", false
}

// claim records the claim on the Pod (so a successor extender keeps it),
// deletes the placeholder with a UID precondition and no grace period, and
// waits until the informer has seen it go, so the ledger agrees with the
// node before the Binding exists. deleted: the placeholder is gone (or
// going); took: this delete removed it, so its capacity is this Pod's to
// record. A placeholder someone else deleted first (NotFound, or Conflict:
// the name holds a newer Pod) leaves capacity this bind may use, but the
// claim is the deleter's, not this Pod's.
func (e *Extender) claim(ctx context.Context, pod *corev1.Pod, ph *ledger.Placeholder) (deleted, took bool, err error) {
	began := time.Now()
	// Usually the filter already recorded this claim while the scheduler
	// finished its cycle; otherwise record it now. Either way the record is
	// durable before the placeholder is deleted.
	if !e.intents.wait(ctx, pod.UID, *ph) {
		// No resourceVersion precondition: this write answers before the
		// Binding is made, in this goroutine, and the informer's copy of
		// the Pod may lag the intent that just failed.
		if err := annotateClaim(ctx, e.client, pod, *ph, ""); err != nil {
			return false, false, &bindError{reasonAnnotate, err}
		}
	}
	e.step("claim_annotate", began)
	// Deleting a placeholder is the one step another leader could race.
	if err := e.leading(); err != nil {
		return false, false, err
	}
	began = time.Now()
	grace := int64(0)
	uid := ph.UID
	opts := &metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}}
	obj, err := e.deletePod(ctx, ph.Namespace, ph.Name, opts)
	e.step("claim_delete", began)
	switch {
	case err == nil:
		took = true
		if !ph.Reservation {
			e.metrics.claims.WithLabelValues(ph.Spec).Inc()
		}
		// With grace period 0 and no finalizers the API server removes the
		// Pod from storage before it answers: it is gone now, and waiting
		// for the watch would only add latency to every takeover. A Pod
		// that still has finalizers is gone only once the watch says so.
		if p, ok := obj.(*corev1.Pod); !ok || len(p.Finalizers) == 0 {
			return true, true, nil
		}
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Gone already (NotFound), or the name now holds a newer Pod
		// (Conflict on the UID precondition): either way that placeholder's
		// capacity is no longer held, and the claim is not this Pod's.
	default:
		return false, false, &bindError{reasonDelete, fmt.Errorf("deleting placeholder %s/%s: %w", ph.Namespace, ph.Name, err)}
	}
	defer e.step("claim_wait", time.Now())
	if err := e.ledger.WaitGone(ctx, ph.UID); err != nil {
		return true, took, &bindError{reasonGone, err}
	}
	return true, took, nil
}
