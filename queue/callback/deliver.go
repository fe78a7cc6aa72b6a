package callback

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/stream"
)

// Config configures a Deliverer.
type Config struct {
	Store *stream.Store
	// MasterKey derives every namespace's signing key (NamespaceKey).
	MasterKey []byte
	// Namespaces tells the UID of a namespace whose callback was recorded
	// without one (before keys followed the UID); default NoNamespaces.
	Namespaces Namespaces
	// Delivery is the configuration file's section: the target rules
	// and the bounds of attempts and POSTs in flight.
	Delivery
	// Backoff is the wait before the first retry (default 1s), doubled
	// for each further one up to MaxBackoff (default 5m).
	Backoff, MaxBackoff time.Duration
	// Timeout bounds one POST (default 10s).
	Timeout time.Duration
	// NamespaceMaxPending bounds the callbacks of one namespace held in
	// memory, queued or waiting for a retry (default 1000); the others
	// stay pending in their Records and are read back when there is room.
	NamespaceMaxPending int
	Clock               clock.WithDelayedExecution
	Logger              *slog.Logger
	Registerer          prometheus.Registerer
}

func (c Config) withDefaults() Config {
	c.Delivery.Default()
	c.Backoff = cmp.Or(c.Backoff, time.Second)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, 5*time.Minute)
	c.Timeout = cmp.Or(c.Timeout, 10*time.Second)
	c.NamespaceMaxPending = cmp.Or(c.NamespaceMaxPending, 1000)
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Namespaces == nil {
		c.Namespaces = NoNamespaces{}
	}
	c.Logger = cmp.Or(c.Logger, slog.Default())
	return c
}

// Deliverer POSTs the completion callbacks of terminal invocations. It
// runs on the activator's leader only (one sender per callback): it
// watches the Records bucket, from its current content on, so a new leader
// picks up what the last one left pending, and records every attempt in
// the Record (compare-and-set) before the next is scheduled. Delivery is
// at least once: a leader that dies between a POST and its record sends
// that POST again; DeliveryHeader lets the receiver drop the copy.
type Deliverer struct {
	cfg    Config
	client *http.Client
	m      *deliverMetrics
	// q: Records keys with a POST queued, running or waiting for its
	// retry here (so the watch's view of our own writes adds nothing),
	// served to the workers namespace by namespace.
	q *fairQueue

	mu sync.Mutex
	// scanning: namespaces being rescanned; again: rescan once more after.
	scanning, again map[string]bool
}

// New returns a Deliverer; Start runs it.
func New(cfg Config) (*Deliverer, error) {
	cfg = cfg.withDefaults()
	if cfg.Store == nil || len(cfg.MasterKey) == 0 {
		return nil, errors.New("callback: Store and MasterKey are required")
	}
	if cfg.Workers < 1 || cfg.NamespaceWorkers < 1 || cfg.NamespaceMaxPending < 1 {
		return nil, fmt.Errorf("callback: workers %d, namespace workers %d and namespace max pending %d must be positive",
			cfg.Workers, cfg.NamespaceWorkers, cfg.NamespaceMaxPending)
	}
	targets, err := cfg.Targets()
	if err != nil {
		return nil, fmt.Errorf("callback: %w", err)
	}
	return &Deliverer{cfg: cfg, client: targets.Client(cfg.Timeout), m: newDeliverMetrics(cfg.Registerer),
		q: newFairQueue(cfg.NamespaceWorkers, cfg.NamespaceMaxPending), scanning: map[string]bool{}, again: map[string]bool{}}, nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (d *Deliverer) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable: it delivers until ctx ends.
func (d *Deliverer) Start(ctx context.Context) error {
	w, err := d.cfg.Store.Records.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("callback: watch records: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var wg sync.WaitGroup
	for range d.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				key, ok := d.q.next(ctx)
				if !ok {
					return
				}
				keep := d.deliver(ctx, key)
				if d.q.done(key, keep) {
					d.rescan(ctx, namespaceOf(key), &wg)
				}
			}
		}()
	}
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil // the watch stops with ctx
				}
				return errors.New("callback: the records watch ended")
			}
			if e != nil && e.Operation() == jetstream.KeyValuePut && wantsCallback(e.Value()) {
				// Refused when its namespace is full: it stays pending in
				// the Record, and the namespace's rescan finds it.
				d.add(e.Key())
			}
		}
	}
}

// add queues key; false when its namespace is full (it stays pending in
// its Record, and a rescan reads it back).
func (d *Deliverer) add(key string) bool {
	if _, full := d.q.add(key); full {
		d.m.deferred.Inc()
		return false
	}
	return true
}

// callbackMarker is in every Record that asks for a callback; most ask
// for none and are skipped undecoded.
const callbackMarker = `"callback":{`

// wantsCallback: a Record with a callback due.
func wantsCallback(value []byte) bool {
	if !bytes.Contains(value, []byte(callbackMarker)) {
		return false
	}
	rec, err := stream.Decode(value)
	return err == nil && due(rec)
}

// rescan reads namespace ns's Records again and queues the callbacks due
// that it refused while the namespace was full. One rescan of a namespace
// at a time; asked again meanwhile, it runs once more when it ends.
func (d *Deliverer) rescan(ctx context.Context, ns string, wg *sync.WaitGroup) {
	d.mu.Lock()
	if d.scanning[ns] {
		d.again[ns] = true
		d.mu.Unlock()
		return
	}
	d.scanning[ns] = true
	d.mu.Unlock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		backoff := wait.Backoff{Duration: time.Second, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt32}
		for {
			if err := d.scan(ctx, ns); err != nil && ctx.Err() == nil {
				// Nothing else would read the refused callbacks back before
				// the namespace overflows again: retry.
				d.cfg.Logger.Warn("callback: rescan of a namespace's records; retrying", "namespace", ns, "err", err, "in", backoff.Duration)
				select {
				case <-ctx.Done():
				case <-d.cfg.Clock.After(backoff.Step()):
				}
				if ctx.Err() == nil {
					continue
				}
			}
			d.mu.Lock()
			if !d.again[ns] || ctx.Err() != nil {
				delete(d.scanning, ns)
				delete(d.again, ns)
				d.mu.Unlock()
				return
			}
			delete(d.again, ns)
			d.mu.Unlock()
		}
	}()
}

func (d *Deliverer) scan(ctx context.Context, ns string) error {
	w, err := d.cfg.Store.Records.Watch(ctx, ns+".>", jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("the watch ended")
			}
			if e == nil {
				return nil // the namespace's current Records are read
			}
			// Full again: stop reading; the next drain to half rescans.
			if e.Operation() == jetstream.KeyValuePut && wantsCallback(e.Value()) && !d.add(e.Key()) {
				return nil
			}
		}
	}
}

// due: a callback event to send: the start once the invocation runs (or
// has ended), the completion once it is terminal.
func due(r messages.Record) bool {
	_, ok := next(r)
	return ok
}

// next is the event of r to send now: the start first, when asked for
// and pending; then the completion.
func next(r messages.Record) (messages.CallbackEvent, bool) {
	if r.Callback == nil {
		return "", false
	}
	if st := r.Callback.Start; st != nil && st.State == messages.CallbackPending && (r.State == messages.StateRunning || r.State.Terminal()) {
		return messages.CallbackEventStart, true
	}
	if r.State.Terminal() && r.Callback.State == messages.CallbackPending {
		return messages.CallbackEventCompleted, true
	}
	return "", false
}

// delivery is the state and attempts of event's delivery in c.
func delivery(c *messages.CallbackStatus, event messages.CallbackEvent) (*messages.CallbackState, *[]messages.CallbackAttempt) {
	if event == messages.CallbackEventStart {
		return &c.Start.State, &c.Start.Attempts
	}
	return &c.State, &c.Attempts
}

// deliver makes the next attempt of key's next callback event when it is
// due, records it, and schedules what follows: keep is true when a retry
// or the next event is scheduled (the key stays pending in the queue,
// holding no worker while it waits).
func (d *Deliverer) deliver(ctx context.Context, key string) (keep bool) {
	rec, _, err := d.cfg.Store.Get(ctx, key)
	if err != nil && !errors.Is(err, stream.ErrNotFound) {
		// A transient read error (NATS reconnecting): try again, else the
		// callback would wait for the next leader.
		d.retryAt(ctx, key, time.Second)
		return true
	}
	event, ok := next(rec)
	if err != nil || !ok {
		return false
	}
	_, attempts := delivery(rec.Callback, event)
	now := d.cfg.Clock.Now()
	if n := len(*attempts); n > 0 {
		if next := (*attempts)[n-1].NextAt; next != nil && next.After(now) {
			d.retryAt(ctx, key, next.Sub(now))
			return true
		}
	}
	keys, err := d.keys(ctx, rec)
	if err != nil {
		d.cfg.Logger.Warn("callback: the namespace's key; trying again", "record", key, "err", err)
		d.retryAt(ctx, key, time.Second)
		return true
	}
	attempt := d.post(ctx, rec, event, keys)
	if ctx.Err() != nil {
		return false // stopped mid-POST: the next leader sends it
	}
	n := len(*attempts) + 1
	state := messages.CallbackPending
	switch {
	case attempt.StatusCode >= 200 && attempt.StatusCode < 300:
		state = messages.CallbackDelivered
	case n >= d.cfg.MaxAttempts:
		state = messages.CallbackFailed
	default:
		next := attempt.At.Add(d.backoff(n))
		attempt.NextAt = &next
	}
	d.m.attempts.WithLabelValues(string(state)).Inc()
	cur, _, err := d.cfg.Store.Update(ctx, key, func(r *messages.Record) bool {
		if e, ok := next(*r); !ok || e != event {
			return false // another sender got there
		}
		st, as := delivery(r.Callback, event)
		if len(*as) != n-1 {
			return false
		}
		*as = append(*as, attempt)
		*st = state
		return true
	})
	if err != nil {
		d.cfg.Logger.Warn("callback: record attempt", "record", key, "err", err)
	}
	if state == messages.CallbackPending {
		d.retryAt(ctx, key, d.backoff(n))
		return true
	}
	if err == nil && due(cur) {
		d.retryAt(ctx, key, 0) // the completion after the start
		return true
	}
	return false
}

// retryAt makes key ready again after a while (a stopped leader's timers
// fire into a queue no worker reads: the next leader starts afresh).
func (d *Deliverer) retryAt(ctx context.Context, key string, after time.Duration) {
	d.cfg.Clock.AfterFunc(after, func() {
		if ctx.Err() == nil {
			d.q.requeue(key)
		}
	})
}

// backoff is the wait after the n-th failed attempt.
func (d *Deliverer) backoff(n int) time.Duration {
	b := wait.Backoff{Duration: d.cfg.Backoff, Factor: 2, Cap: d.cfg.MaxBackoff, Steps: n - 1}
	for b.Steps > 0 {
		b.Step()
	}
	return min(b.Duration, d.cfg.MaxBackoff)
}

// keys are those rec's callback is signed with: its namespace's when it
// was accepted. One recorded before keys followed the namespace's UID is
// signed with the namespace's current key and, for receivers that still
// hold it, the old name-only key; with the old key alone when the
// namespace is gone (its new owner, if any, has another key).
func (d *Deliverer) keys(ctx context.Context, rec messages.Record) ([][]byte, error) {
	if id := rec.Callback.KeyID; id != "" {
		return [][]byte{NamespaceKey(d.cfg.MasterKey, rec.Namespace, id)}, nil
	}
	legacy := LegacyNamespaceKey(d.cfg.MasterKey, rec.Namespace)
	uid, err := d.cfg.Namespaces.UID(ctx, rec.Namespace, false)
	if errors.Is(err, ErrNoNamespace) {
		return [][]byte{legacy}, nil
	}
	if err != nil {
		return nil, err
	}
	return [][]byte{NamespaceKey(d.cfg.MasterKey, rec.Namespace, uid), legacy}, nil
}

// post sends rec, signed with keys, to its callback URL once, as event.
func (d *Deliverer) post(ctx context.Context, rec messages.Record, event messages.CallbackEvent, keys [][]byte) messages.CallbackAttempt {
	at := d.cfg.Clock.Now().UTC()
	a := messages.CallbackAttempt{At: at}
	// The caller's view of the Record (Invocation).
	body, err := Encode(Invocation(rec))
	if err != nil {
		a.Error = err.Error()
		return a
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rec.Callback.URL, bytes.NewReader(body))
	if err != nil {
		a.Error = err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "runplane-callback")
	req.Header.Set(EventHeader, string(event))
	what := string(rec.State)
	if event == messages.CallbackEventStart {
		what = string(event)
	}
	req.Header.Set(DeliveryHeader, rec.Namespace+"/"+rec.InvocationID+"/"+what)
	req.Header.Set(SignatureHeader, Sign(at, body, keys...))
	resp, err := d.client.Do(req)
	if err != nil {
		if re := (*RefusedError)(nil); errors.As(err, &re) {
			d.cfg.Logger.Info("callback: target refused", "namespace", rec.Namespace, "invocation", rec.InvocationID, "addr", re.Addr, "reason", re.Reason)
		}
		a.Error = attemptError(rec.Callback.URL, err)
		return a
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	a.StatusCode = resp.StatusCode
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		a.Error = "HTTP " + resp.Status
	}
	return a
}

type deliverMetrics struct {
	attempts *prometheus.CounterVec
	deferred prometheus.Counter
}

func newDeliverMetrics(r prometheus.Registerer) *deliverMetrics {
	m := &deliverMetrics{attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runplane_callback_attempts_total",
		Help: "Completion callback POSTs, by the callback's state after them (delivered, pending: retried, failed: given up)."}, []string{"state"}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{Name: "runplane_callback_deferred_total",
			Help: "Callbacks left pending in their Records because their namespace had as many held in memory as it may (read back once it has room)."})}
	if r != nil {
		_ = r.Register(m.attempts)
		_ = r.Register(m.deferred)
	}
	return m
}
