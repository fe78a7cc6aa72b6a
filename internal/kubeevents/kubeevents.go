// Package kubeevents records runplane's Kubernetes Events (events.k8s.io/v1)
// so that `kubectl describe` lists them in order among everyone else's.
//
// kubectl describe reads core/v1 Events and sorts them by lastTimestamp
// only (k8s.io/kubectl/pkg/util/event.SortableEvents). client-go's
// events.k8s.io recorder sets eventTime and series but leaves the
// deprecated first/last timestamps and count empty, so its Events read back
// with a zero lastTimestamp: kubectl puts them before every Event of the
// Deployment controller or kubelet, and in no stable order among
// themselves. The events.k8s.io API refuses those fields, so the sink here
// writes the recorder's Events through the core/v1 API with them set from
// eventTime and the series (as the Deployment controller's and kubelet's
// Events have them). RBAC: create and patch core ("") events.
package kubeevents

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Sink is an events.EventSink writing the events.k8s.io Events client-go's
// recorder makes through the core/v1 API, with the first/last timestamps
// and count kubectl describe sorts and counts by. (The events.k8s.io API
// rejects those fields: "needs to be unset".) Event names, eventTime,
// action, related object and series are kept as the events.k8s.io API
// stores them.
type Sink struct {
	Client corev1client.EventsGetter
}

var _ events.EventSink = Sink{}

// toCore is e as a core/v1 Event with the deprecated fields set from
// eventTime and the series.
func toCore(e *eventsv1.Event) *corev1.Event {
	c := &corev1.Event{
		ObjectMeta:          *e.ObjectMeta.DeepCopy(),
		InvolvedObject:      e.Regarding,
		Related:             e.Related,
		Reason:              e.Reason,
		Message:             e.Note,
		Type:                e.Type,
		Action:              e.Action,
		EventTime:           e.EventTime,
		ReportingController: e.ReportingController,
		ReportingInstance:   e.ReportingInstance,
		Source:              e.DeprecatedSource,
		FirstTimestamp:      metav1.NewTime(e.EventTime.Time),
		LastTimestamp:       metav1.NewTime(e.EventTime.Time),
		Count:               1,
	}
	if e.Series != nil {
		c.Series = &corev1.EventSeries{Count: e.Series.Count, LastObservedTime: e.Series.LastObservedTime}
		c.LastTimestamp = metav1.NewTime(e.Series.LastObservedTime.Time)
		c.Count = e.Series.Count
	}
	return c
}

// fromCore is what the broadcaster keeps of a written Event (its name and
// series for the next patch).
func fromCore(c *corev1.Event) *eventsv1.Event {
	e := &eventsv1.Event{
		ObjectMeta:          *c.ObjectMeta.DeepCopy(),
		EventTime:           c.EventTime,
		ReportingController: c.ReportingController,
		ReportingInstance:   c.ReportingInstance,
		Action:              c.Action,
		Reason:              c.Reason,
		Regarding:           c.InvolvedObject,
		Related:             c.Related,
		Note:                c.Message,
		Type:                c.Type,
	}
	if c.Series != nil {
		e.Series = &eventsv1.EventSeries{Count: c.Series.Count, LastObservedTime: c.Series.LastObservedTime}
	}
	return e
}

// Create implements events.EventSink.
func (s Sink) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	c, err := s.Client.Events(e.Namespace).Create(ctx, toCore(e), metav1.CreateOptions{})
	if err != nil {
		// Not wrapped: the broadcaster retries or drops by the error's concrete type.
		return nil, err
	}
	return fromCore(c), nil
}

// Update implements events.EventSink.
func (s Sink) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	c, err := s.Client.Events(e.Namespace).Update(ctx, toCore(e), metav1.UpdateOptions{})
	if err != nil {
		// Not wrapped, as in Create.
		return nil, err
	}
	return fromCore(c), nil
}

// Patch implements events.EventSink. The broadcaster patches an Event's
// series when it repeats; data is that patch in events.k8s.io's terms, so
// the core/v1 patch is made here from e (which carries the new series):
// the series, lastTimestamp and count.
func (s Sink) Patch(ctx context.Context, e *eventsv1.Event, _ []byte) (*eventsv1.Event, error) {
	if e.Series == nil {
		return nil, fmt.Errorf("patch event %s/%s: no series to patch", e.Namespace, e.Name)
	}
	c := toCore(e)
	data, err := json.Marshal(map[string]any{"series": c.Series, "lastTimestamp": c.LastTimestamp, "count": c.Count})
	if err != nil {
		return nil, fmt.Errorf("encode the series patch of event %s/%s: %w", e.Namespace, e.Name, err)
	}
	out, err := s.Client.Events(e.Namespace).Patch(ctx, e.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{})
	if err != nil {
		// Not wrapped, as in Create; on NotFound the broadcaster creates the Event anew.
		return nil, err
	}
	return fromCore(out), nil
}

// NewBroadcaster is an events.k8s.io broadcaster writing through Sink.
func NewBroadcaster(c kubernetes.Interface) events.EventBroadcaster {
	return events.NewBroadcaster(Sink{Client: c.CoreV1()})
}

// Start starts a broadcaster writing until ctx ends and returns a recorder
// reporting as controller. Eventf only queues: the broadcaster writes from
// its own goroutine (and drops Events, never blocks, when the API server is
// slow).
func Start(ctx context.Context, c kubernetes.Interface, controller string) events.EventRecorder {
	b := NewBroadcaster(c)
	b.StartRecordingToSink(ctx.Done())
	go func() { <-ctx.Done(); b.Shutdown() }()
	return b.NewRecorder(scheme.Scheme, controller)
}

// ForManager is a recorder for a controller-runtime manager's controllers,
// in place of mgr.GetEventRecorder (whose sink cannot be replaced): it
// writes from now until the manager stops.
func ForManager(mgr manager.Manager, controller string) (events.EventRecorder, error) {
	c, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("event recorder %s: %w", controller, err)
	}
	b := NewBroadcaster(c)
	stop := make(chan struct{})
	b.StartRecordingToSink(stop)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		close(stop)
		b.Shutdown()
		return nil
	})); err != nil {
		return nil, fmt.Errorf("event recorder %s: %w", controller, err)
	}
	return b.NewRecorder(mgr.GetScheme(), controller), nil
}
