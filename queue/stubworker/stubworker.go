// Package stubworker is a test worker that speaks the internal/messages
// contract against real NATS the way the sidecar does: it registers and
// heartbeats on metrics.<ns>.<pool>.<worker>, consumes dispatch.<pool>.<worker> through a
// durable consumer, publishes started/finished Events, the Result on
// result.<pool> (Nats-Msg-Id = DispatchMsgID) and the sync reply, and
// honours Cancel. It stands in for the real sidecar in queue tests and
// benchmarks.
package stubworker

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
)

// Handler runs one invocation. The default echoes the payload.
type Handler func(ctx context.Context, d messages.Dispatch) (*framework.Response, messages.State, string)

// Echo answers 200 with the payload as body.
func Echo(_ context.Context, d messages.Dispatch) (*framework.Response, messages.State, string) {
	return &framework.Response{StatusCode: 200, ContentType: "application/json", Body: d.Payload}, messages.StateSucceeded, ""
}

// Sleep returns a handler that takes d before echoing (or is cancelled).
func Sleep(d time.Duration) Handler {
	return func(ctx context.Context, x messages.Dispatch) (*framework.Response, messages.State, string) {
		select {
		case <-time.After(d):
			return Echo(ctx, x)
		case <-ctx.Done():
			return nil, messages.StateCancelled, "cancelled"
		}
	}
}

// Log counts executions per invocation across workers.
type Log struct {
	mu   sync.Mutex
	runs map[string][]string
}

// NewLog returns an empty Log.
func NewLog() *Log { return &Log{runs: map[string][]string{}} }

func (l *Log) add(id, worker string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.runs[id] = append(l.runs[id], worker)
	l.mu.Unlock()
}

// Runs returns the workers that ran id, in order.
func (l *Log) Runs(id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.runs[id]...)
}

// Total is the number of executions.
func (l *Log) Total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.runs {
		n += len(r)
	}
	return n
}

// Config describes a stub worker.
type Config struct {
	NC         *nats.Conn
	Stream     string
	Subjects   messages.Subjects
	Pool, Name string
	// Namespace is the worker's (and its pool's) namespace (default "default").
	Namespace   string
	Concurrency int
	Heartbeat   time.Duration // default 200ms
	Handler     Handler
	Log         *Log
	// Ready reported in heartbeats (default true).
	NotReady bool
	// DeliverAll makes a new consumer start at the first dispatch stored
	// for the worker, as the sidecar's does, instead of at new ones.
	DeliverAll bool
}

// Worker is a running stub worker.
type Worker struct {
	cfg     Config
	cc      jetstream.ConsumeContext
	sub     *nats.Subscription
	stop    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	running map[string]context.CancelFunc
	// ackErrors counts acknowledgements the server did not take.
	ackErrors atomic.Int64
	wg        sync.WaitGroup
	dead      bool
}

// Start registers the worker and starts consuming its dispatch subject.
func Start(ctx context.Context, cfg Config) (*Worker, error) {
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 1)
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, 200*time.Millisecond)
	cfg.Namespace = cmp.Or(cfg.Namespace, "default")
	if cfg.Handler == nil {
		cfg.Handler = Echo
	}
	w := &Worker{cfg: cfg, stop: make(chan struct{}), running: map[string]context.CancelFunc{}}
	js, err := jetstream.New(cfg.NC)
	if err != nil {
		return nil, err
	}
	deliver := jetstream.DeliverNewPolicy
	if cfg.DeliverAll {
		deliver = jetstream.DeliverAllPolicy
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, cfg.Stream, jetstream.ConsumerConfig{
		Durable:       messages.ConsumerName(cfg.Namespace, cfg.Pool, cfg.Name),
		FilterSubject: cfg.Subjects.Dispatch(cfg.Namespace, cfg.Pool, cfg.Name),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: deliver,
		AckWait:       30 * time.Second,
		MaxAckPending: cfg.Concurrency,
	})
	if err != nil {
		return nil, fmt.Errorf("stub worker consumer: %w", err)
	}
	w.sub, err = cfg.NC.Subscribe(cfg.Subjects.Cancel(cfg.Namespace, cfg.Pool, cfg.Name), func(m *nats.Msg) {
		var c messages.Cancel
		if json.Unmarshal(m.Data, &c) == nil {
			w.mu.Lock()
			if f := w.running[c.InvocationID]; f != nil {
				f()
			}
			w.mu.Unlock()
		}
	})
	if err != nil {
		return nil, err
	}
	w.cc, err = cons.Consume(func(m jetstream.Msg) {
		w.wg.Add(1)
		go w.handle(js, m)
	})
	if err != nil {
		return nil, err
	}
	w.event(messages.EventRegistered, "", 0, "")
	w.wg.Add(1) // Stop deregisters only after the last heartbeat
	go w.heartbeat()
	return w, nil
}

func (w *Worker) inflight() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running)
}

func (w *Worker) event(t messages.EventType, id string, attempt int, st messages.State) {
	ev := messages.Event{Type: t, Pool: w.cfg.Pool, Worker: w.cfg.Name, Namespace: w.cfg.Namespace, Concurrency: w.cfg.Concurrency,
		InFlight: w.inflight(), Ready: !w.cfg.NotReady, InvocationID: id, Attempt: attempt, State: st, At: time.Now().UTC()}
	b, _ := json.Marshal(ev)
	_ = w.cfg.NC.Publish(w.cfg.Subjects.Events(w.cfg.Namespace, w.cfg.Pool, w.cfg.Name), b)
}

func (w *Worker) heartbeat() {
	defer w.wg.Done()
	t := time.NewTicker(w.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.event(messages.EventHeartbeat, "", 0, "")
		}
	}
}

func (w *Worker) handle(js jetstream.JetStream, m jetstream.Msg) {
	defer w.wg.Done()
	var d messages.Dispatch
	if err := json.Unmarshal(m.Data(), &d); err != nil {
		w.acked(m.Term())
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	if d.TimeoutSeconds > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), time.Duration(d.TimeoutSeconds)*time.Second)
	}
	defer cancel()
	w.mu.Lock()
	if w.dead {
		w.mu.Unlock()
		return
	}
	w.running[d.InvocationID] = cancel
	w.mu.Unlock()
	w.cfg.Log.add(d.InvocationID, w.cfg.Name)
	started := time.Now().UTC()
	w.event(messages.EventStarted, d.InvocationID, d.Attempt, messages.StateRunning)
	resp, state, errMsg := w.cfg.Handler(ctx, d)
	if ctx.Err() == context.DeadlineExceeded {
		state, errMsg = messages.StateTimedOut, "timeoutSeconds exceeded"
	}
	w.mu.Lock()
	delete(w.running, d.InvocationID)
	dead := w.dead
	w.mu.Unlock()
	if dead {
		return // killed: vanish without a trace, like a lost Pod
	}
	res := messages.Result{InvocationID: d.InvocationID, Namespace: w.cfg.Namespace, Pool: w.cfg.Pool, Worker: w.cfg.Name, Attempt: d.Attempt, State: state,
		Response: (*messages.Response)(resp), Error: errMsg, StartedAt: started, FinishedAt: time.Now().UTC(), ResultToken: d.ResultToken}
	b, _ := json.Marshal(res)
	pctx, pc := context.WithTimeout(context.Background(), 10*time.Second)
	defer pc()
	// No Nats-Msg-Id, like the sidecar: results share a stream with every
	// tenant's workers.
	if _, err := js.PublishMsg(pctx, &nats.Msg{Subject: w.cfg.Subjects.Result(w.cfg.Namespace, w.cfg.Pool), Data: b, Header: nats.Header{}}); err != nil {
		w.acked(m.Nak())
		return
	}
	if d.ReplyTo != "" {
		_ = w.cfg.NC.Publish(d.ReplyTo, b)
	}
	w.acked(m.Ack())
	w.event(messages.EventFinished, d.InvocationID, d.Attempt, state)
}

// acked counts a failed acknowledgement: the dispatch is then redelivered
// after the ack wait, which the exactly-once tests must survive.
func (w *Worker) acked(err error) {
	if err != nil {
		w.ackErrors.Add(1)
	}
}

// AckErrors is how many acknowledgements failed.
func (w *Worker) AckErrors() int64 { return w.ackErrors.Load() }

// Stop deregisters and stops the worker after its running invocations.
func (w *Worker) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.cc.Stop()
		_ = w.sub.Unsubscribe()
		w.wg.Wait()
		w.event(messages.EventDeregistered, "", 0, "")
	})
}

// Kill makes the worker vanish: no more heartbeats, no results, no
// deregistration (a crashed Pod).
func (w *Worker) Kill() {
	w.once.Do(func() {
		w.mu.Lock()
		w.dead = true
		for _, c := range w.running {
			c()
		}
		w.mu.Unlock()
		close(w.stop)
		w.cc.Stop()
		_ = w.sub.Unsubscribe()
	})
}
