package stream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/test/natsauth"

	"github.com/stretchr/testify/require"

	"github.com/stretchr/testify/assert"
)

func TestAdvance(t *testing.T) {
	q, d, r, s := messages.StateQueued, messages.StateDispatched, messages.StateRunning, messages.StateSucceeded
	tests := []struct {
		cur        messages.State
		curAttempt int
		next       messages.State
		attempt    int
		want       bool
	}{
		{q, 0, d, 1, true},
		{d, 1, r, 1, true},
		{r, 1, d, 1, false},                    // no going back within an attempt
		{r, 1, d, 2, true},                     // redelivery supersedes
		{d, 2, r, 1, false},                    // stale attempt
		{r, 2, s, 1, true},                     // any attempt may finish
		{s, 1, messages.StateFailed, 1, false}, // terminal is final
		{messages.StateCancelled, 0, d, 1, false},
		{q, 0, messages.StateCancelled, 0, true},
	}
	for _, tc := range tests {
		got := Advance(tc.cur, tc.curAttempt, tc.next, tc.attempt)
		assert.Equal(t, tc.want, got, "Advance(%s@%d → %s@%d) = %v, want %v", tc.cur, tc.curAttempt, tc.next, tc.attempt, got, tc.want)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		c    Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"replicas", Config{Replicas: 7}, false},
		{"window beyond age", Config{MaxAge: metav1.Duration{Duration: time.Minute}, DuplicateWindow: metav1.Duration{Duration: time.Hour}}, false},
		{"ttl below window", Config{DuplicateWindow: metav1.Duration{Duration: time.Hour}, RecordTTL: metav1.Duration{Duration: time.Minute}}, false},
		{"results stream is the invocation stream", Config{Stream: "S", ResultsStream: "S"}, false},
		{"results stream smaller than a result", Config{ResultsMaxBytes: 1024, ResultMaxMsgSize: 4096}, false},
		{"objects expire before their Record", Config{RecordTTL: metav1.Duration{Duration: time.Hour}, ObjectTTL: time.Minute}, false},
		{"objects outlive their Record", Config{RecordTTL: metav1.Duration{Duration: time.Hour}, ObjectTTL: 2 * time.Hour}, true},
	}
	for _, tc := range tests {
		err := tc.c.WithDefaults().Validate()
		assert.False(t, (err == nil) != tc.ok, "%s: err %v", tc.name, err)
	}
}

func open(t *testing.T) *Store {
	t.Helper()
	js, _ := jetstream.New(natsauth.Connect(t, natsauth.JetStream(t, nil).ClientURL()))
	st, err := Open(context.Background(), js, Config{DuplicateWindow: metav1.Duration{Duration: time.Second}, RecordTTL: metav1.Duration{Duration: time.Hour}})
	require.NoError(t, err)
	return st
}

func TestOpenCreatesStreamAndBuckets(t *testing.T) {
	st := open(t)
	info, err := st.Stream.Info(context.Background())
	require.NoError(t, err)
	require.False(t, info.Config.Storage != jetstream.FileStorage || info.Config.Duplicates != time.Second, "stream config %+v", info.Config)
	assert.Equal(t, []string{"runtime.serverless.invoke.>", "runtime.serverless.dispatch.>", "runtime.serverless.deadletter.>"}, info.Config.Subjects,
		"workers publish nothing into the invocation stream")
	rinfo, err := st.Results.Info(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"runtime.serverless.result.>"}, rinfo.Config.Subjects)
	assert.Equal(t, st.Config.Stream+"_RESULTS", rinfo.Config.Name)
	assert.Equal(t, jetstream.DiscardNew, rinfo.Config.Discard)
	assert.Equal(t, int32(DefaultResultMaxMsgSize), rinfo.Config.MaxMsgSize)
	assert.Equal(t, int64(1<<30), rinfo.Config.MaxBytes)
	// Re-opening (another replica, a restart) is fine.
	_, err = Open(context.Background(), st.JS, st.Config)
	require.NoError(t, err)
}

// TestCreateFirstWriterWins: of many concurrent creators of one ID exactly
// one wins; CAS updates from many writers all land.
func TestCreateFirstWriterWins(t *testing.T) {
	st := open(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.Create(ctx, messages.Record{Namespace: "ns", InvocationID: "x", State: messages.StateQueued})
			if err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			} else if !errors.Is(err, ErrExists) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, 1, wins, "%d creators won", wins)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := st.Update(ctx, Key("ns", "x"), func(r *messages.Record) bool { r.Attempt++; return true }); err != nil {
				t.Error(err, i)
			}
		}()
	}
	wg.Wait()
	r, _, err := st.Get(ctx, Key("ns", "x"))
	require.False(t, err != nil || r.Attempt != 8, "attempt %d after 8 CAS increments (%v)", r.Attempt, err)
	_, _, err = st.Get(ctx, Key("ns", "missing"))
	require.ErrorIs(t, err, ErrNotFound)
}

// TestTransitionCached: a writer that keeps the Record it wrote updates it
// without reading; a stale copy (someone else wrote in between) costs a
// read and loses nothing.
func TestTransitionCached(t *testing.T) {
	tests := []struct {
		name string
		// meddle writes between the cached writer's writes (nil: nobody).
		meddle    func(t *testing.T, st *Store)
		wantState messages.State
		wantError string
		wantOK    bool
	}{
		{"nobody else writes", nil, messages.StateRunning, "", true},
		{"another writer in between", func(t *testing.T, st *Store) {
			_, _, err := st.Update(context.Background(), Key("ns", "c"), func(r *messages.Record) bool { r.Error = "note"; return true })
			require.NoError(t, err)
		}, messages.StateRunning, "note", true},
		{"cancelled in between", func(t *testing.T, st *Store) {
			_, _, err := st.Transition(context.Background(), Key("ns", "c"), messages.StateCancelled, "", 0, nil)
			require.NoError(t, err)
		}, messages.StateCancelled, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := open(t)
			ctx := context.Background()
			r := messages.Record{Namespace: "ns", InvocationID: "c", Pool: "p", State: messages.StateQueued}
			rev, err := st.Create(ctx, r)
			require.NoError(t, err)
			c := messages.Cached{Record: r, Rev: rev}
			ok, err := st.TransitionCached(ctx, Key("ns", "c"), &c, messages.StateDispatched, "w", 1, nil)
			require.NoError(t, err)
			require.True(t, ok, "dispatch from the created revision")
			if tc.meddle != nil {
				tc.meddle(t, st)
			}
			ok, err = st.TransitionCached(ctx, Key("ns", "c"), &c, messages.StateRunning, "w", 1, nil)
			require.NoError(t, err)
			require.Equal(t, tc.wantOK, ok, "running")
			got, gotRev, err := st.Get(ctx, Key("ns", "c"))
			require.NoError(t, err)
			require.False(t, got.State != tc.wantState || got.Error != tc.wantError || got.Worker != "w" || got.Attempt != 1, "stored %+v, want state %s error %q worker w attempt 1", got, tc.wantState, tc.wantError)
			require.False(t, c.Rev != gotRev || c.Record.State != got.State, "cache at rev %d (%s), store at %d (%s)", c.Rev, c.Record.State, gotRev, got.State)
		})
	}
}

// TestOpenMigratesResults: an invocation stream of an older release also
// stored results. Open removes the result subject from it without touching
// its invocations, copies the results its results consumer had not acked
// to the results stream (without their Nats-Msg-Id), deletes that consumer
// and purges the old results; opening again changes nothing.
func TestOpenMigratesResults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := jetstream.New(natsauth.Connect(t, natsauth.JetStream(t, nil).ClientURL()))
	cfg := Config{DuplicateWindow: metav1.Duration{Duration: time.Second}, RecordTTL: metav1.Duration{Duration: time.Hour}}.WithDefaults()
	subj := messages.Subjects{Prefix: cfg.Prefix}
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: cfg.Stream, Duplicates: time.Second,
		Subjects: []string{subj.Prefix + ".invoke.>", subj.Prefix + ".dispatch.>", subj.Prefix + ".result.>", subj.Prefix + ".deadletter.>"}})
	require.NoError(t, err)
	old, err := js.CreateOrUpdateConsumer(ctx, cfg.Stream, jetstream.ConsumerConfig{Durable: "runplane-activator-results",
		FilterSubject: subj.Result("*", "*"), AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	for i, id := range []string{"a", "b", "c"} {
		_, err := js.Publish(ctx, subj.Invoke("ns", "p"), []byte(id), jetstream.WithMsgID(messages.MsgID("ns", id)))
		require.NoError(t, err)
		_, err = js.Publish(ctx, subj.Result("ns", "p"), []byte("result-"+id), jetstream.WithMsgID(messages.DispatchMsgID("ns", id, i)))
		require.NoError(t, err)
	}
	// The old activator handled the first result.
	m, err := old.Next(jetstream.FetchMaxWait(5 * time.Second))
	require.NoError(t, err)
	require.Equal(t, "result-a", string(m.Data()))
	require.NoError(t, m.DoubleAck(ctx))

	st, err := Open(ctx, js, cfg)
	require.NoError(t, err)
	info, err := st.Stream.Info(ctx)
	require.NoError(t, err)
	assert.NotContains(t, info.Config.Subjects, subj.Prefix+".result.>")
	assert.Equal(t, uint64(3), info.State.Msgs, "the three invocations stay; the old results are purged")
	_, err = st.Stream.Consumer(ctx, "runplane-activator-results")
	assert.ErrorIs(t, err, jetstream.ErrConsumerNotFound, "the old results consumer is deleted")
	copied := readAll(t, ctx, st.Results)
	require.Len(t, copied, 2, "the unhandled results")
	for i, want := range []string{"result-b", "result-c"} {
		assert.Equal(t, want, string(copied[i].Data()))
		assert.Empty(t, copied[i].Headers().Get(jetstream.MsgIDHeader))
		assert.NotEmpty(t, copied[i].Headers().Get(MigratedHeader))
	}

	// Workers' results now land in the results stream, and a result with
	// an invocation's message ID no longer suppresses the invocation.
	_, err = js.Publish(ctx, subj.Result("ns", "p"), []byte("poison"), jetstream.WithMsgID(messages.MsgID("ns", "d")))
	require.NoError(t, err)
	ack, err := js.Publish(ctx, subj.Invoke("ns", "p"), []byte("d"), jetstream.WithMsgID(messages.MsgID("ns", "d")))
	require.NoError(t, err)
	assert.False(t, ack.Duplicate)
	assert.Equal(t, cfg.Stream, ack.Stream)

	_, err = Open(ctx, js, cfg)
	require.NoError(t, err)
	assert.Len(t, readAll(t, ctx, st.Results), 3, "a second Open copies nothing again")
}

func readAll(t *testing.T, ctx context.Context, s jetstream.Stream) []jetstream.Msg {
	t.Helper()
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out []jetstream.Msg
	for range info.State.Msgs {
		m, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		out = append(out, m)
	}
	return out
}

// TestEnsureWorkerConsumer: the queue makes a worker's consumer: created
// when missing (delivering only what comes after it), updated in place
// when an older sidecar made a compatible one (its unacked dispatches
// kept), replaced when it is a push consumer a worker made under an older
// grant (e.g. delivering to another tenant's cancel subject), refused for
// names that are not subject tokens.
func TestEnsureWorkerConsumer(t *testing.T) {
	st := open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	subj := st.Subjects
	name := messages.ConsumerName("team-a", "echo", "w1")
	info := func() *jetstream.ConsumerInfo {
		c, err := st.JS.Consumer(ctx, st.Config.Stream, name)
		require.NoError(t, err)
		return c.CachedInfo()
	}

	_, err := st.JS.Publish(ctx, subj.Dispatch("team-a", "echo", "w1"), []byte("old"))
	require.NoError(t, err)
	require.NoError(t, st.EnsureWorkerConsumer(ctx, "team-a", "echo", "w1"))
	got := info()
	assert.Equal(t, jetstream.DeliverNewPolicy, got.Config.DeliverPolicy)
	assert.Zero(t, got.NumPending, "a new consumer replays nothing")
	assert.Equal(t, 30*time.Second, got.Config.AckWait)
	require.NoError(t, st.EnsureWorkerConsumer(ctx, "team-a", "echo", "w1"), "idempotent")

	// An older sidecar's consumer: DeliverAll, its own ack wait.
	require.NoError(t, st.JS.DeleteConsumer(ctx, st.Config.Stream, name))
	_, err = st.JS.CreateConsumer(ctx, st.Config.Stream, jetstream.ConsumerConfig{Durable: name, FilterSubject: subj.Dispatch("team-a", "echo", "w1"),
		AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy, AckWait: 5 * time.Second})
	require.NoError(t, err)
	require.NoError(t, st.EnsureWorkerConsumer(ctx, "team-a", "echo", "w1"))
	got = info()
	assert.Equal(t, jetstream.DeliverAllPolicy, got.Config.DeliverPolicy, "kept in place")
	assert.Equal(t, uint64(1), got.NumPending, "its pending dispatch kept")
	assert.Equal(t, 30*time.Second, got.Config.AckWait, "updated")

	// A worker's push consumer delivering to another tenant's cancels.
	require.NoError(t, st.JS.DeleteConsumer(ctx, st.Config.Stream, name))
	_, err = st.JS.CreateConsumer(ctx, st.Config.Stream, jetstream.ConsumerConfig{Durable: name, FilterSubject: subj.Dispatch("team-a", "echo", "w1"),
		DeliverSubject: subj.Cancel("team-b", "echo", "v1"), AckPolicy: jetstream.AckNonePolicy})
	require.NoError(t, err)
	require.NoError(t, st.EnsureWorkerConsumer(ctx, "team-a", "echo", "w1"))
	got = info()
	assert.Empty(t, got.Config.DeliverSubject, "replaced by a pull consumer")
	assert.Equal(t, jetstream.AckExplicitPolicy, got.Config.AckPolicy)

	for _, bad := range [][3]string{{"team-a", "echo", "w.1"}, {"team-a", "*", "w1"}, {"", "echo", "w1"}} {
		assert.Error(t, st.EnsureWorkerConsumer(ctx, bad[0], bad[1], bad[2]), "%v", bad)
	}
}

// TestMigrationIgnoresWorkerChosenHeaders: an old result whose worker set
// a server header (Nats-Expected-Stream, which names the stream it may
// land in) is copied without it; one that cannot be copied is reported,
// never a reason for Open to fail (the queue would not start).
func TestMigrationIgnoresWorkerChosenHeaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := jetstream.New(natsauth.Connect(t, natsauth.JetStream(t, nil).ClientURL()))
	cfg := Config{DuplicateWindow: metav1.Duration{Duration: time.Second}, RecordTTL: metav1.Duration{Duration: time.Hour}, ResultMaxMsgSize: 4096}.WithDefaults()
	subj := messages.Subjects{Prefix: cfg.Prefix}
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: cfg.Stream, Duplicates: time.Second,
		Subjects: []string{subj.Prefix + ".invoke.>", subj.Prefix + ".dispatch.>", subj.Prefix + ".result.>", subj.Prefix + ".deadletter.>"}})
	require.NoError(t, err)
	_, err = js.CreateOrUpdateConsumer(ctx, cfg.Stream, jetstream.ConsumerConfig{Durable: "activator-results",
		FilterSubject: subj.Result("*", "*"), AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	steered := nats.NewMsg(subj.Result("ns", "p"))
	steered.Data = []byte("steered")
	steered.Header.Set(jetstream.ExpectedStreamHeader, cfg.Stream)
	_, err = js.PublishMsg(ctx, steered)
	require.NoError(t, err)
	_, err = js.Publish(ctx, subj.Result("ns", "p"), make([]byte, 8192)) // over the new per-result limit
	require.NoError(t, err)

	st, err := Open(ctx, js, cfg)
	require.NoError(t, err, "one old result must not keep the queue from starting")
	copied := readAll(t, ctx, st.Results)
	require.Len(t, copied, 1)
	assert.Equal(t, "steered", string(copied[0].Data()))
	assert.Empty(t, copied[0].Headers().Get(jetstream.ExpectedStreamHeader))
	require.Len(t, st.MigrationSkipped, 1, "the oversized result is reported")
}

// TestResultsStreamKeepsOnlyUnhandledPerPool: a handled (acked) result
// leaves the results stream, and one pool's unhandled results fill only
// that pool's room.
func TestResultsStreamKeepsOnlyUnhandledPerPool(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := jetstream.New(natsauth.Connect(t, natsauth.JetStream(t, nil).ClientURL()))
	st, err := Open(ctx, js, Config{DuplicateWindow: metav1.Duration{Duration: time.Second}, RecordTTL: metav1.Duration{Duration: time.Hour}, ResultsMaxPerPool: 3})
	require.NoError(t, err)
	for i := range 3 {
		_, err := js.Publish(ctx, st.Subjects.Result("mallory", "flood"), []byte{byte(i)})
		require.NoError(t, err)
	}
	_, err = js.Publish(ctx, st.Subjects.Result("mallory", "flood"), []byte("one too many"))
	require.Error(t, err, "the flooding pool's room is full")
	_, err = js.Publish(ctx, st.Subjects.Result("victim", "echo"), []byte("ok"))
	require.NoError(t, err, "another pool's result is stored")

	c, err := st.Results.Consumer(ctx, ResultsConsumer)
	require.NoError(t, err)
	batch, err := c.Fetch(4, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	for m := range batch.Messages() {
		require.NoError(t, m.DoubleAck(ctx))
	}
	info, err := st.Results.Info(ctx)
	require.NoError(t, err)
	assert.Zero(t, info.State.Msgs, "handled results are removed")
	_, err = js.Publish(ctx, st.Subjects.Result("mallory", "flood"), []byte("room again"))
	require.NoError(t, err)
}

// TestPurgeKeepsTheDuplicateWindow: exactly-once leans on the stream's
// duplicate window, and the activator removes finished work with a purge
// per subject (Purge with Subject and Sequence): nats-server's purge
// removes the messages and leaves the window's message IDs as they are
// (stream.purgeLocked touches no ddmap), so a re-publish with the same
// Nats-Msg-Id after the purge is still a duplicate and stores nothing.
func TestPurgeKeepsTheDuplicateWindow(t *testing.T) {
	ctx := context.Background()
	js, _ := jetstream.New(natsauth.Connect(t, natsauth.JetStream(t, nil).ClientURL()))
	st, err := Open(ctx, js, Config{}) // the default window: 2 minutes
	require.NoError(t, err)
	subj := st.Subjects.Invoke("ns", "p")
	other := st.Subjects.Invoke("ns", "q")
	for _, m := range []struct{ subject, id string }{{subj, "ns/a"}, {subj, "ns/b"}, {other, "ns/c"}} {
		_, err := js.Publish(ctx, m.subject, []byte(`{}`), jetstream.WithMsgID(m.id))
		require.NoError(t, err)
	}
	require.NoError(t, st.Stream.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(3)))
	info, err := st.Stream.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, info.State.Msgs, "only the other subject's message stays")

	for _, id := range []string{"ns/a", "ns/b"} {
		pa, err := js.Publish(ctx, subj, []byte(`{}`), jetstream.WithMsgID(id))
		require.NoError(t, err)
		assert.True(t, pa.Duplicate, "%s re-published after the purge is a duplicate", id)
	}
	info, err = st.Stream.Info(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 1, info.State.Msgs, "the duplicates stored nothing")
	pa, err := js.Publish(ctx, subj, []byte(`{}`), jetstream.WithMsgID("ns/d"))
	require.NoError(t, err)
	assert.False(t, pa.Duplicate, "a new ID is stored")
}

// TestDeleteMsgOfAGoneMessage: deleting a message that is not there —
// deleted already, purged, or never stored — is jetstream.ErrMsgNotFound,
// which nats.go's own DeleteMsg never returns (it answers
// ErrMsgDeleteUnsuccessful with the server's error as text), so the
// activator's sweep and purge rounds took a message another removal had
// just taken for a failure.
func TestDeleteMsgOfAGoneMessage(t *testing.T) {
	ctx := t.Context()
	st := open(t)
	subj := st.Subjects.Invoke("ns", "p")
	for range 3 {
		_, err := st.JS.Publish(ctx, subj, []byte(`{}`))
		require.NoError(t, err)
	}
	require.NoError(t, st.DeleteMsg(ctx, 1))
	require.NoError(t, st.Stream.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(3)))

	raw := st.Stream.DeleteMsg(ctx, 1)
	require.ErrorIs(t, raw, jetstream.ErrMsgDeleteUnsuccessful)
	require.NotErrorIs(t, raw, jetstream.ErrMsgNotFound, "nats.go reports a gone message as found: DeleteMsg's wrapper can go")
	for _, seq := range []uint64{1, 2, 7} { // deleted, purged, never stored
		assert.ErrorIs(t, st.DeleteMsg(ctx, seq), jetstream.ErrMsgNotFound, "sequence %d", seq)
	}
	require.NoError(t, st.DeleteMsg(ctx, 3), "a message that is there is deleted")
}

// TestCreateAfterDeleteClustered: of concurrent creators of an ID whose
// Record was deleted (an accept whose publish failed, an orphan removed)
// exactly one wins and every other is told ErrExists, on a replicated
// Records bucket too. There a lost compare-and-set is nats-server's
// err_code 10164, which nats.go's KV Create maps to ErrKeyExists only when
// the key was never written: over a delete marker it retries at the
// marker's revision and returns the raw 10164, so the ingress answered a
// duplicate of a winning accept with 503 instead of as a duplicate.
func TestCreateAfterDeleteClustered(t *testing.T) {
	a, servers := natsauth.Cluster(t, nil, 3)
	asQueue, err := a.QueueOption()
	require.NoError(t, err)
	js, err := jetstream.New(natsauth.Connect(t, natsauth.ClientURLs(servers), asQueue))
	require.NoError(t, err)
	ctx := t.Context()
	st, err := Open(ctx, js, Config{Replicas: 3, RecordTTL: metav1.Duration{Duration: time.Hour}})
	require.NoError(t, err)
	for i := range 20 {
		r := messages.Record{Namespace: "ns", InvocationID: fmt.Sprintf("x%d", i), State: messages.StateQueued}
		_, err := st.Create(ctx, r)
		require.NoError(t, err)
		require.NoError(t, st.Delete(ctx, Key(r.Namespace, r.InvocationID)))
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for j := range errs {
			wg.Go(func() { _, errs[j] = st.Create(ctx, r) })
		}
		wg.Wait()
		wins := 0
		for _, err := range errs {
			if err == nil {
				wins++
			} else {
				require.ErrorIs(t, err, ErrExists, "round %d: a lost create of a deleted Record", i)
			}
		}
		require.Equal(t, 1, wins, "round %d", i)
	}
}

// TestGetAfterCreateClustered: a Record created through one server of a
// three-server cluster is found by a read through another right after:
// a KV get is a direct get any replica answers, and a follower behind the
// newest writes said "not found" (183 of 3,000 such reads before), so a
// GET right after its 202 could answer 404.
func TestGetAfterCreateClustered(t *testing.T) {
	a, servers := natsauth.Cluster(t, nil, 3)
	asQueue, err := a.QueueOption()
	require.NoError(t, err)
	ctx := t.Context()
	stores := make([]*Store, len(servers))
	for i, s := range servers {
		js, err := jetstream.New(natsauth.Connect(t, s.ClientURL(), asQueue))
		require.NoError(t, err)
		stores[i] = openReplicated(t, js)
	}
	var missed []string
	for i, start := 0, time.Now(); i < 1000 || time.Since(start) < natsauth.FollowersServeDirectGets; i++ {
		r := messages.Record{Namespace: "ns", InvocationID: fmt.Sprintf("x%d", i), State: messages.StateQueued}
		rev, err := stores[i%3].Create(ctx, r)
		require.NoError(t, err)
		got, gotRev, err := stores[(i+1)%3].Get(ctx, Key(r.Namespace, r.InvocationID))
		if err != nil {
			missed = append(missed, fmt.Sprintf("%s: %v", r.InvocationID, err))
			continue
		}
		require.Equal(t, r.InvocationID, got.InvocationID)
		require.Equal(t, rev, gotRev)
	}
	require.Empty(t, missed, "Records created a moment before, read through another server")

	_, _, err = stores[1].Get(ctx, Key("ns", "never"))
	require.ErrorIs(t, err, ErrNotFound)
}

// TestLastChunkAfterPublishClustered: the last chunk published through
// one server of a three-server cluster is the last one an ingress reads
// through another right after — how a streamed invocation's end is found
// (ingress lastChunk). With direct gets, which any replica answers, a
// follower behind the newest writes answered an older chunk or none, and
// the stream ended before its last chunks.
func TestLastChunkAfterPublishClustered(t *testing.T) {
	a, servers := natsauth.Cluster(t, nil, 3)
	asQueue, err := a.QueueOption()
	require.NoError(t, err)
	ctx := t.Context()
	chunks := make([]jetstream.Stream, len(servers))
	var js []jetstream.JetStream
	for i, s := range servers {
		j, err := jetstream.New(natsauth.Connect(t, s.ClientURL(), asQueue))
		require.NoError(t, err)
		js = append(js, j)
		st := openReplicated(t, j)
		chunks[i], err = st.Chunks.Ensure(ctx, "ns")
		require.NoError(t, err)
	}
	subj := messages.Subjects{Prefix: Config{}.WithDefaults().Prefix}
	var behind []string
	for i, start := 0, time.Now(); i < 1000 || time.Since(start) < natsauth.FollowersServeDirectGets; i++ {
		s := subj.ChunkSubject("ns", "p", "w", fmt.Sprintf("x%d", i%50))
		pa, err := js[i%3].Publish(ctx, s, []byte("chunk"))
		require.NoError(t, err)
		m, err := chunks[(i+1)%3].GetLastMsgForSubject(ctx, s)
		if err != nil || m.Sequence != pa.Sequence {
			behind = append(behind, fmt.Sprintf("%d: %v", i, err))
		}
	}
	require.Empty(t, behind, "the last chunk, read through another server right after")
}

// openReplicated opens the store at three replicas through js, as the
// queue does: again until the cluster, just started, can place them (at
// load its first stream creates time out meanwhile).
func openReplicated(t *testing.T, js jetstream.JetStream) *Store {
	t.Helper()
	var st *Store
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		st, err = Open(t.Context(), js, Config{Replicas: 3, RecordTTL: metav1.Duration{Duration: time.Hour}})
		assert.NoError(c, err)
	}, time.Minute, 100*time.Millisecond)
	return st
}
