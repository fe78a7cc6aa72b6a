// Package stream owns the queue service's JetStream resources: the stream
// that stores invocations, dispatches and dead letters (only the queue
// publishes into it), the results stream that workers publish into, the
// workers' dispatch consumers (created by the queue, never by a worker), the KV
// bucket that holds each invocation's Record (state and result), and the KV
// bucket where the activator publishes pool status for the ingress
// replicas. Record updates go through compare-and-set so concurrent writers
// (ingress, activator) never lose a transition.
package stream

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/objects"
)

// Config names and sizes the JetStream resources. It is the stream
// section of runplane-queue's configuration file as it is (queue/config;
// the keys are the json names), defaulted by WithDefaults; the fields
// without a key are for tests and the queue itself.
type Config struct {
	// Prefix of every subject (default api.DefaultSubjectPrefix).
	Prefix string `json:"subjectPrefix,omitempty"`
	// Stream is the stream name (default api.DefaultStreamName).
	Stream string `json:"name,omitempty"`
	// Replicas of the stream and buckets (default 1).
	Replicas int `json:"replicas,omitempty"`
	// MaxAge of stream messages (default 72h).
	MaxAge metav1.Duration `json:"maxAge,omitzero"`
	// MaxBytes bounds the invocation stream (0 or -1: unbounded, the
	// server's own limits apply). A full stream refuses new invocations
	// (the ingress answers 503) and never drops a stored one: discard new.
	MaxBytes int64 `json:"maxBytes,omitempty"`
	// DuplicateWindow of the stream (default 2m). Idempotency beyond it
	// comes from the Records bucket.
	DuplicateWindow metav1.Duration `json:"duplicateWindow,omitzero"`
	// RecordsBucket is the KV bucket of invocation Records
	// (default "runplane-invocations"), RecordTTL how long a Record is kept
	// (default 24h), RecordsMaxBytes its bound (0 or -1: unbounded; a full
	// bucket refuses new Records, 503).
	RecordsBucket   string          `json:"recordsBucket,omitempty"`
	RecordTTL       metav1.Duration `json:"recordTTL,omitzero"`
	RecordsMaxBytes int64           `json:"recordsMaxBytes,omitempty"`
	// ResultsMaxBytes bounds the results stream (default 1 GiB); when it
	// is full, new results are refused (the sidecar retries and then
	// lets the dispatch be redelivered) rather than unread ones dropped.
	ResultsMaxBytes int64 `json:"resultsMaxBytes,omitempty"`
	// ResultMaxMsgSize bounds one result message, headers included
	// (default DefaultResultMaxMsgSize).
	ResultMaxMsgSize int32 `json:"resultMaxSize,omitempty"`
	// ObjectsMaxBytes bounds each namespace's Object Store bucket of
	// payloads and results too big for one NATS message, shared by its
	// pools: the tenant's budget (default 128 MiB; -1: unbounded). A full
	// bucket refuses new big payloads (503) and results (the invocation
	// fails); JetStream reserves it when the bucket is made.
	ObjectsMaxBytes int64 `json:"objectsMaxBytes,omitempty"`
	// ChunksConfig sizes the namespaces' chunks streams of streamed
	// invocations (chunks.go; keys chunksMaxAge, chunksMaxBytes,
	// chunksPerInvocation).
	ChunksConfig

	// PoolsBucket holds the activator's per-pool status (default "runplane-pools").
	PoolsBucket string `json:"-"`
	// ResultsStream is the stream of worker results, subjects
	// <prefix>.result.> (default messages.ResultsStreamName(Stream)).
	ResultsStream string `json:"-"`
	// ResultsMaxPerPool bounds the unhandled results of one pool (default
	// 10000); beyond it that pool's new results are refused, no other's.
	ResultsMaxPerPool int64 `json:"-"`
	// Worker is the configuration of the workers' dispatch consumers.
	Worker WorkerConsumer `json:"-"`
	// ObjectTTL is how long such an object is kept (default RecordTTL +
	// 1h: it outlives the Record that names it, and goes soon after).
	ObjectTTL time.Duration `json:"-"`
	// ActivatorShards is the activator's shard count (0 or 1: one
	// activator for every namespace). Unsharded, Open makes the activator's
	// results consumer (ResultsConsumer) before any result can be stored;
	// sharded, each shard's activator makes its own, filtered on its
	// namespaces (no result exists before its namespace's first dispatch),
	// and Open makes none: a consumer nobody reads would keep every result
	// in the interest-retention stream.
	ActivatorShards int `json:"-"`
}

// WorkerConsumer configures the durable pull consumer the queue creates
// for each worker when the auth callout admits it.
type WorkerConsumer struct {
	// AckWait (default 30s; the sidecar sends in-progress acks every
	// third of it, which it reads from the consumer).
	AckWait time.Duration
	// MaxAckPending bounds the dispatches a worker holds unacked (default
	// 1024; the activator never sends a worker more than its concurrency).
	MaxAckPending int
	// InactiveThreshold lets the server delete the consumer of a worker
	// that stopped pulling (default 10m).
	InactiveThreshold time.Duration
	// MaxDeliver bounds the deliveries of one dispatch (default 5): a
	// dispatch delivered that often without an ack is dead-lettered by
	// the activator (its max-deliveries advisory), never delivered again.
	MaxDeliver int
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	c.Prefix = cmp.Or(c.Prefix, api.DefaultSubjectPrefix)
	c.Stream = cmp.Or(c.Stream, api.DefaultStreamName)
	c.Replicas = cmp.Or(c.Replicas, 1)
	c.MaxAge.Duration = cmp.Or(c.MaxAge.Duration, 72*time.Hour)
	c.DuplicateWindow.Duration = cmp.Or(c.DuplicateWindow.Duration, 2*time.Minute)
	c.RecordsBucket = cmp.Or(c.RecordsBucket, "runplane-invocations")
	c.RecordTTL.Duration = cmp.Or(c.RecordTTL.Duration, 24*time.Hour)
	c.PoolsBucket = cmp.Or(c.PoolsBucket, "runplane-pools")
	c.ResultsStream = cmp.Or(c.ResultsStream, messages.ResultsStreamName(c.Stream))
	c.ResultsMaxBytes = cmp.Or(c.ResultsMaxBytes, 1<<30)
	c.ResultsMaxPerPool = cmp.Or(c.ResultsMaxPerPool, 10000)
	c.ResultMaxMsgSize = cmp.Or(c.ResultMaxMsgSize, DefaultResultMaxMsgSize)
	c.ObjectsMaxBytes = cmp.Or(c.ObjectsMaxBytes, 128<<20)
	c.ObjectTTL = cmp.Or(c.ObjectTTL, c.RecordTTL.Duration+time.Hour)
	c.ChunksConfig = c.ChunksConfig.withDefaults()
	c.Worker.AckWait = cmp.Or(c.Worker.AckWait, 30*time.Second)
	c.Worker.MaxAckPending = cmp.Or(c.Worker.MaxAckPending, 1024)
	c.Worker.InactiveThreshold = cmp.Or(c.Worker.InactiveThreshold, 10*time.Minute)
	c.Worker.MaxDeliver = cmp.Or(c.Worker.MaxDeliver, DefaultWorkerMaxDeliver)
	return c
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	if c.Replicas < 1 || c.Replicas > 5 {
		return fmt.Errorf("stream replicas %d: must be between 1 and 5", c.Replicas)
	}
	if c.DuplicateWindow.Duration > c.MaxAge.Duration {
		return fmt.Errorf("duplicate window %s must not exceed max age %s", c.DuplicateWindow.Duration, c.MaxAge.Duration)
	}
	if c.ResultsStream == c.Stream {
		return fmt.Errorf("results stream %q must differ from the invocation stream", c.ResultsStream)
	}
	if c.ResultsMaxBytes < int64(c.ResultMaxMsgSize) {
		return fmt.Errorf("results stream max bytes %d must be at least the max result size %d", c.ResultsMaxBytes, c.ResultMaxMsgSize)
	}
	for name, n := range map[string]int64{"stream": c.MaxBytes, "records": c.RecordsMaxBytes} {
		if n > 0 && n < 1<<20 {
			return fmt.Errorf("%s max bytes %d: at least 1 MiB, or -1 for unbounded", name, n)
		}
	}
	if err := c.ChunksConfig.validate(); err != nil {
		return err
	}
	if c.ObjectTTL < c.RecordTTL.Duration {
		return fmt.Errorf("object TTL %s must be at least the record TTL %s (a Record must not name an object that is gone)", c.ObjectTTL, c.RecordTTL.Duration)
	}
	if c.RecordTTL.Duration < c.DuplicateWindow.Duration {
		return fmt.Errorf("record TTL %s must be at least the duplicate window %s", c.RecordTTL.Duration, c.DuplicateWindow.Duration)
	}
	return nil
}

// DefaultResultMaxMsgSize is the default bound of one result message:
// nats-server's default max_payload (1 MiB), beyond which no client can
// publish anyway. Raise both together.
const DefaultResultMaxMsgSize = 1 << 20

// Store is the opened set of resources.
type Store struct {
	Config   Config
	Subjects messages.Subjects
	JS       jetstream.JetStream
	// Stream holds invocations, dispatches and dead letters.
	Stream jetstream.Stream
	// Results holds worker results.
	Results jetstream.Stream
	Records jetstream.KeyValue
	Pools   jetstream.KeyValue
	// Objects are the pools' Object Store buckets (internal/objects).
	Objects *objects.Buckets
	// Chunks are the namespaces' streams of streamed invocations' output
	// (chunks.go), made lazily.
	Chunks *ChunkStreams
	// MigrationSkipped lists old results (sequence: error) that could not
	// be moved to the results stream at this start.
	MigrationSkipped []string
}

// Open creates or updates the stream and buckets and returns the Store.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	subj := messages.Subjects{Prefix: cfg.Prefix}
	// An invocation stream of an older release also stores results: its
	// unhandled results move to the results stream (see migrateResults).
	moved, err := migrateResults(ctx, js, cfg, subj)
	if err != nil {
		return nil, err
	}
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       cfg.Stream,
		Subjects:   subj.StreamSubjects(),
		Storage:    jetstream.FileStorage,
		Retention:  jetstream.LimitsPolicy,
		Replicas:   cfg.Replicas,
		MaxAge:     cfg.MaxAge.Duration,
		Duplicates: cfg.DuplicateWindow.Duration,
		// Bounded, a full stream refuses what comes (a new invocation gets
		// 503; a dispatch is retried) and never drops a queued invocation
		// to make room, as discard old would.
		MaxBytes: bounded(cfg.MaxBytes),
		Discard:  jetstream.DiscardNew,
	})
	if err != nil {
		return nil, fmt.Errorf("create stream %s: %w", cfg.Stream, err)
	}
	res, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        cfg.ResultsStream,
		Description: "worker results of stream " + cfg.Stream,
		Subjects:    subj.ResultStreamSubjects(),
		Storage:     jetstream.FileStorage,
		// A result is kept until the activator has acked (or termed) it,
		// then removed: the stream holds only unhandled results, and a
		// worker's junk is drained at the activator's pace. Each pool
		// (subject <prefix>.result.<ns>.<pool>) may hold at most
		// ResultsMaxPerPool unhandled ones, so one tenant's flood fills its
		// own pool's room, never the others'.
		Retention:            jetstream.InterestPolicy,
		Replicas:             cfg.Replicas,
		MaxAge:               cfg.MaxAge.Duration,
		MaxBytes:             cfg.ResultsMaxBytes,
		MaxMsgSize:           cfg.ResultMaxMsgSize,
		MaxMsgsPerSubject:    cfg.ResultsMaxPerPool,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		// Workers choose their headers: no worker's Nats-Msg-Id may hold
		// back another's result for long (results carry none; a result
		// stored twice is handled once).
		Duplicates: time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("create stream %s: %w", cfg.ResultsStream, err)
	}
	// Interest retention keeps a result only for a consumer that exists:
	// the activator's durable is created here, before any result (the
	// migrated ones included) can be published; the activator updates
	// its settings when it starts. Sharded: see ActivatorShards.
	if err := ensureResultsConsumer(ctx, js, cfg, subj); err != nil {
		return nil, err
	}
	if err := moved.read(ctx, st); err != nil {
		return nil, err
	}
	if err := moved.finish(ctx, js, st); err != nil {
		return nil, err
	}
	rec, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:   cfg.RecordsBucket,
		TTL:      cfg.RecordTTL.Duration,
		Storage:  jetstream.FileStorage,
		Replicas: cfg.Replicas,
		History:  1,
		MaxBytes: bounded(cfg.RecordsMaxBytes),
	})
	if err != nil {
		return nil, fmt.Errorf("create KV bucket %s: %w", cfg.RecordsBucket, err)
	}
	pools, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:   cfg.PoolsBucket,
		Storage:  jetstream.FileStorage,
		Replicas: cfg.Replicas,
		History:  1,
	})
	if err != nil {
		return nil, fmt.Errorf("create KV bucket %s: %w", cfg.PoolsBucket, err)
	}
	store := &Store{Config: cfg, Subjects: subj, JS: js, Stream: st, Results: res, Records: rec, Pools: pools,
		Objects: &objects.Buckets{JS: js, Cfg: cfg.ObjectsConfig()},
		Chunks:  &ChunkStreams{JS: js, Cfg: cfg.ChunksConfig, Stream: cfg.Stream, Replicas: cfg.Replicas, Subjects: subj}}
	if moved != nil {
		store.MigrationSkipped = moved.skipped
	}
	return store, nil
}

// bounded maps the unbounded 0 to JetStream's -1.
func bounded(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}

// ObjectsConfig is the configuration of the pools' Object Store buckets.
func (c Config) ObjectsConfig() objects.Config {
	return objects.Config{StreamName: c.Stream, TTL: c.ObjectTTL, MaxBytes: c.ObjectsMaxBytes, Replicas: c.Replicas}
}

// ensureResultsConsumer makes the unsharded activator's results consumer.
func ensureResultsConsumer(ctx context.Context, js jetstream.JetStream, cfg Config, subj messages.Subjects) error {
	if cfg.ActivatorShards > 1 {
		return nil
	}
	_, err := js.CreateConsumer(ctx, cfg.ResultsStream, jetstream.ConsumerConfig{
		Durable: ResultsConsumer, FilterSubject: subj.Result("*", "*"), AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
		return fmt.Errorf("create consumer %s of stream %s: %w", ResultsConsumer, cfg.ResultsStream, err)
	}
	return nil
}

// ResultsConsumer is the activator's durable consumer of the results
// stream (its ConsumerPrefix "activator" + "-results").
const ResultsConsumer = "activator-results"

// Key is the Records bucket key of invocation id of namespace ns: IDs are
// unique per namespace, and one namespace's key never names another's
// Record. (Neither a namespace nor an ID contains '.'.)
func Key(ns, id string) string { return ns + "." + id }

// PoolKey is the pool-status bucket key of pool ns/pool.
func PoolKey(ns, pool string) string { return ns + "." + pool }

// ErrExists is returned by Create when the invocation ID is taken.
var ErrExists = errors.New("invocation record exists")

// ErrNotFound is returned when there is no Record for an ID.
var ErrNotFound = errors.New("invocation record not found")

// Create writes a new Record; the first writer wins (KV Create is atomic).
func (s *Store) Create(ctx context.Context, r messages.Record) (uint64, error) {
	if r.Namespace == "" {
		return 0, fmt.Errorf("create record %s: no namespace", r.InvocationID)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return 0, fmt.Errorf("encode record %s: %w", r.InvocationID, err)
	}
	rev, err := s.Records.Create(ctx, Key(r.Namespace, r.InvocationID), b)
	if createLost(err) {
		return 0, ErrExists
	}
	if err != nil {
		return 0, fmt.Errorf("create record %s: %w", r.InvocationID, err)
	}
	return rev, nil
}

// createLost reports whether err is a KV Create that found the key taken.
// nats.go's Create says so with ErrKeyExists except over a delete marker
// (a Record deleted: an accept whose publish failed, an orphan removed):
// it retries at the marker's revision and returns a lost compare-and-set
// as it is, which a replicated bucket answers with err_code 10164, not
// 10071 (the code ErrKeyExists matches).
func createLost(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) ||
		(errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Get reads a Record and its revision; id is its Key.
//
// A miss is asked again of a replicated bucket's stream leader. A KV get is a
// direct get, which any replica of a replicated bucket answers, and a
// follower that has not applied the newest writes yet answers "not found"
// for a Record created a moment before: 183 of 3,000 reads right after a
// create through another server of three missed, so a GET right after
// its 202 could answer 404 (TestGetAfterCreateClustered). A Record that
// is found may still be a write behind (a state the next read moves on
// from); one that exists is never reported missing.
func (s *Store) Get(ctx context.Context, id string) (messages.Record, uint64, error) {
	e, err := s.Records.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		if s.Config.Replicas > 1 { // one replica is its own leader
			return s.getFromLeader(ctx, id)
		}
		return messages.Record{}, 0, ErrNotFound
	}
	if err != nil {
		return messages.Record{}, 0, fmt.Errorf("get record %s: %w", id, err)
	}
	r, err := Decode(e.Value())
	if err != nil {
		return messages.Record{}, 0, fmt.Errorf("record %s: %w", id, err)
	}
	return r, e.Revision(), nil
}

// getFromLeader reads Record id from the Records bucket's stream leader:
// the last message on its key's subject (the KV layout of NATS ADR-8),
// none or a delete or purge marker being ErrNotFound. nats.go's jetstream
// package always gets directly from a bucket that allows it; its
// JetStreamContext reads through the leader unless told otherwise.
func (s *Store) getFromLeader(ctx context.Context, id string) (messages.Record, uint64, error) {
	js, err := s.JS.Conn().JetStream()
	if err != nil {
		return messages.Record{}, 0, fmt.Errorf("get record %s from the leader: %w", id, err)
	}
	bucket := s.Config.RecordsBucket
	m, err := js.GetLastMsg("KV_"+bucket, "$KV."+bucket+"."+id, nats.Context(ctx))
	if errors.Is(err, nats.ErrMsgNotFound) {
		return messages.Record{}, 0, ErrNotFound
	}
	if err != nil {
		return messages.Record{}, 0, fmt.Errorf("get record %s from the leader: %w", id, err)
	}
	if op := m.Header.Get(kvOperationHeader); op == "DEL" || op == "PURGE" {
		return messages.Record{}, 0, ErrNotFound
	}
	r, err := Decode(m.Data)
	if err != nil {
		return messages.Record{}, 0, fmt.Errorf("record %s: %w", id, err)
	}
	return r, m.Sequence, nil
}

// kvOperationHeader marks a KV delete ("DEL") or purge ("PURGE") message.
const kvOperationHeader = "KV-Operation"

// Delete removes a Record (used when its invocation could not be published).
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := s.Records.Delete(ctx, id); err != nil {
		return fmt.Errorf("delete record %s: %w", id, err)
	}
	return nil
}

// DeleteMsg removes the message at seq from the invocation stream. A
// message that is not there (deleted, purged, expired) gives an error
// that is jetstream.ErrMsgNotFound: nats.go's DeleteMsg reports that case
// as ErrMsgDeleteUnsuccessful with the server's answer as text only
// (nats-server 2.15: err_code 10057 "no message found"), so a caller's
// errors.Is never met it and a sweep or purge round racing another
// removal of the same message failed. Only then is the message looked up,
// so the usual delete stays one request.
func (s *Store) DeleteMsg(ctx context.Context, seq uint64) error {
	err := s.Stream.DeleteMsg(ctx, seq)
	if err == nil || !errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
		return err
	}
	if _, gerr := s.Stream.GetMsg(ctx, seq); errors.Is(gerr, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("delete message %d: %w (%w)", seq, jetstream.ErrMsgNotFound, err)
	}
	return fmt.Errorf("delete message %d: %w", seq, err)
}

// Decode parses a Record.
func Decode(b []byte) (messages.Record, error) {
	var r messages.Record
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("decode record: %w", err)
	}
	return r, nil
}

// MessageOverhead is about what a stored invocation message holds besides
// its body (subject, headers, framing): Record.StreamBytes counts it.
const MessageOverhead = 1 << 10

// RevisionHeader is set by the ingress on the invocation message it
// publishes: the revision of the Record it has just created. The activator
// uses it as the Record's known revision, so its first write is a single
// compare-and-set with no read. It is a hint: a wrong or missing value only
// costs a read.
const RevisionHeader = "Runplane-Record-Revision"

// RequestHashHeader carries, with RevisionHeader, the Record's RequestHash:
// the activator's copy of the Record it did not read must keep it.
const RequestHashHeader = "Runplane-Request-Hash"

// Update applies mutate to the current Record with compare-and-set, retrying
// on conflicts. mutate returns false to leave the Record unchanged. It
// returns the Record as stored afterwards and whether mutate's change was
// written.
func (s *Store) Update(ctx context.Context, id string, mutate func(*messages.Record) bool) (messages.Record, bool, error) {
	var c messages.Cached
	ok, err := s.UpdateCached(ctx, id, &c, mutate)
	return c.Record, ok, err
}

// UpdateCached is Update starting from c instead of a read when c.Rev is
// set; c is refreshed with what is stored afterwards. mutate may see a
// stale c: a refusal is final only for monotonic mutations (Advance: what a
// stale Record refuses, the current one refuses too); others must start
// from an empty Cached.
func (s *Store) UpdateCached(ctx context.Context, id string, c *messages.Cached, mutate func(*messages.Record) bool) (bool, error) {
	for i := 0; ; i++ {
		if c.Rev == 0 {
			r, rev, err := s.Get(ctx, id)
			if err != nil {
				return false, err
			}
			c.Record, c.Rev = r, rev
		}
		r := c.Record
		if !mutate(&r) {
			return false, nil
		}
		r.UpdatedAt = time.Now().UTC()
		b, err := json.Marshal(r)
		if err != nil {
			return false, fmt.Errorf("encode record %s: %w", id, err)
		}
		rev, err := s.Records.Update(ctx, id, b, c.Rev)
		if err == nil {
			c.Record, c.Rev = r, rev
			return true, nil
		}
		conflict := errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
		if !conflict || i > 50 {
			return false, fmt.Errorf("update record %s: %w", id, err)
		}
		// Lost a race with another writer (or the cache was stale):
		// re-read and re-apply.
		c.Rev = 0
	}
}

// rank orders the non-terminal states; terminal states rank highest.
func rank(s messages.State) int {
	switch s {
	case messages.StateQueued:
		return 1
	case messages.StateDispatched:
		return 2
	case messages.StateRunning:
		return 3
	}
	if s.Terminal() {
		return 4
	}
	return 0
}

// Advance reports whether a Record in state cur at attempt curAttempt may
// move to next at attempt attempt. Terminal states never change; a later
// attempt supersedes an earlier one (redelivery); within one attempt states
// only move forward; any attempt may finish a non-terminal Record (the
// first result wins).
func Advance(cur messages.State, curAttempt int, next messages.State, attempt int) bool {
	if cur.Terminal() {
		return false
	}
	if next.Terminal() {
		return true
	}
	if attempt != curAttempt {
		return attempt > curAttempt
	}
	return rank(next) > rank(cur)
}

// Transition moves a Record to state (with worker and attempt) when Advance
// allows it; extra, when set, adjusts the Record further in the same write.
func (s *Store) Transition(ctx context.Context, id string, state messages.State, worker string, attempt int, extra func(*messages.Record)) (messages.Record, bool, error) {
	var c messages.Cached
	ok, err := s.TransitionCached(ctx, id, &c, state, worker, attempt, extra)
	return c.Record, ok, err
}

// TransitionCached is Transition starting from c (see UpdateCached).
func (s *Store) TransitionCached(ctx context.Context, id string, c *messages.Cached, state messages.State, worker string, attempt int, extra func(*messages.Record)) (bool, error) {
	return s.TransitionOfPool(ctx, id, c, "", state, worker, attempt, extra)
}

// TransitionOfPool is TransitionCached that changes nothing unless the
// Record belongs to pool (when not ""): a worker's result only ever
// finishes an invocation of its own pool.
func (s *Store) TransitionOfPool(ctx context.Context, id string, c *messages.Cached, pool string, state messages.State, worker string, attempt int, extra func(*messages.Record)) (bool, error) {
	return s.UpdateCached(ctx, id, c, func(r *messages.Record) bool {
		if pool != "" && r.Pool != pool {
			return false
		}
		if !Advance(r.State, r.Attempt, state, attempt) {
			return false
		}
		r.State = state
		if worker != "" {
			r.Worker = worker
		}
		if attempt > 0 {
			r.Attempt = attempt
		}
		if extra != nil {
			extra(r)
		}
		LeavesStream(r)
		return true
	})
}

// LeavesStream clears the StreamBytes of r when r is final: its writer
// (the activator) removes the invocation's messages from the stream right
// after, so the namespace's share of the stream is given back with this
// write. A dead letter stays in the stream as long as its Record, and
// keeps counting; a Record made final by anyone else (the ingress's
// cancel) keeps counting until the activator has removed its messages
// (ClearStreamBytes).
func LeavesStream(r *messages.Record) {
	if r.State.Terminal() && r.State != messages.StateDeadLettered {
		r.StreamBytes = 0
	}
}

// ClearStreamBytes records that final invocation id's messages have left
// the stream (see LeavesStream); a Record already clear, or not final, is
// left as it is.
func (s *Store) ClearStreamBytes(ctx context.Context, id string) error {
	_, _, err := s.Update(ctx, id, func(r *messages.Record) bool {
		if !r.State.Terminal() || r.State == messages.StateDeadLettered || r.StreamBytes == 0 {
			return false
		}
		r.StreamBytes = 0
		return true
	})
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}
