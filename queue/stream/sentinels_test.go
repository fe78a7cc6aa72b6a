package stream

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/objects"
	"github.com/runplane/runplane/test/natsauth"
)

// TestSentinelsTheQueueReads: every "gone / taken" answer the queue tells
// apart with errors.Is is the sentinel it names, from one server and from
// a 3-server cluster at 3 replicas (the chart's default), whose answers
// differ (a lost compare-and-set is err_code 10164 there, 10071 here).
// nats.go wraps some answers as text only (DeleteMsg: the Store wrapper),
// so each sentinel is checked against the call that produces it at its
// site, not against the library's documentation.
func TestSentinelsTheQueueReads(t *testing.T) {
	for _, tc := range []struct {
		name string
		js   func(t *testing.T) jetstream.JetStream
		reps int
	}{
		{"single server", func(t *testing.T) jetstream.JetStream {
			js, err := jetstream.New(natsauth.Connect(t, natsauth.JetStream(t, nil).ClientURL()))
			require.NoError(t, err)
			return js
		}, 1},
		{"cluster", func(t *testing.T) jetstream.JetStream {
			a, servers := natsauth.Cluster(t, nil, 3)
			asQueue, err := a.QueueOption()
			require.NoError(t, err)
			js, err := jetstream.New(natsauth.Connect(t, natsauth.ClientURLs(servers), asQueue))
			require.NoError(t, err)
			return js
		}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			st, err := Open(ctx, tc.js(t), Config{Replicas: tc.reps, RecordTTL: metav1.Duration{Duration: time.Hour}, ObjectsMaxBytes: 1 << 20})
			require.NoError(t, err)
			subj := st.Subjects.Invoke("ns", "p")
			for range 2 {
				_, err := st.JS.Publish(ctx, subj, []byte(`{}`))
				require.NoError(t, err)
			}
			require.NoError(t, st.DeleteMsg(ctx, 1))
			rev, err := st.Create(ctx, messages.Record{Namespace: "ns", InvocationID: "x", State: messages.StateQueued})
			require.NoError(t, err)
			_, err = st.Records.Put(ctx, Key("ns", "x"), []byte(`{}`))
			require.NoError(t, err)
			chunks, err := st.Chunks.Ensure(ctx, "ns")
			require.NoError(t, err)
			obs, err := st.Objects.Ensure(ctx, "ns")
			require.NoError(t, err)
			ref, err := objects.Put(ctx, obs, "ns/y/payload", []byte("payload"), 1<<20)
			require.NoError(t, err)
			require.NoError(t, obs.Delete(ctx, ref.Name))

			for _, c := range []struct {
				site string
				call func() error
				want error
			}{
				{"rebuild, readInvocation: GetMsg of a deleted message", func() error { _, err := st.Stream.GetMsg(ctx, 1); return err }, jetstream.ErrMsgNotFound},
				{"migrate read: GetMsg by subject past the last", func() error {
					_, err := st.Stream.GetMsg(ctx, 3, jetstream.WithGetMsgSubject(subj))
					return err
				}, jetstream.ErrMsgNotFound},
				{"waitResults: GetLastMsgForSubject of no result", func() error {
					_, err := st.Results.GetLastMsgForSubject(ctx, st.Subjects.Result("ns", "p"))
					return err
				}, jetstream.ErrMsgNotFound},
				{"sse: GetMsg of a chunk never stored", func() error { _, err := chunks.GetMsg(ctx, 5); return err }, jetstream.ErrMsgNotFound},
				{"sse lastChunk: GetLastMsgForSubject of no chunk", func() error {
					_, err := chunks.GetLastMsgForSubject(ctx, st.Subjects.ChunkSubject("ns", "p", "w", "x"))
					return err
				}, jetstream.ErrMsgNotFound},
				{"sweep, purge: Store.DeleteMsg of a deleted message", func() error { return st.DeleteMsg(ctx, 1) }, jetstream.ErrMsgNotFound},
				{"sidecar payload: objects.Get of a deleted object", func() error { _, err := objects.Get(ctx, st.JS, ref, 0); return err }, jetstream.ErrMsgNotFound},
				{"Store.Get: KV Get of no Record", func() error { _, _, err := st.Get(ctx, Key("ns", "none")); return err }, ErrNotFound},
				{"Store.Create: KV Create of a taken ID", func() error {
					_, err := st.Create(ctx, messages.Record{Namespace: "ns", InvocationID: "x"})
					return err
				}, ErrExists},
				{"UpdateCached: KV Update at a stale revision", func() error { _, err := st.Records.Update(ctx, Key("ns", "x"), []byte(`{}`), rev); return err },
					jetstream.ErrKeyRevisionMismatch},
				{"repairOrphan: KV Delete at a stale revision", func() error {
					return st.Records.Delete(ctx, Key("ns", "x"), jetstream.LastRevision(rev))
				}, jetstream.ErrKeyRevisionMismatch},
				{"EnsureWorkerConsumer, keepFiltered: Consumer of none", func() error { _, err := st.JS.Consumer(ctx, st.Config.Stream, "none"); return err },
					jetstream.ErrConsumerNotFound},
				{"recreate, deleteLegacyConsumers: DeleteConsumer of none", func() error { return st.JS.DeleteConsumer(ctx, st.Config.Stream, "none") },
					jetstream.ErrConsumerNotFound},
				{"ensureResultsConsumer: CreateConsumer of another config", func() error {
					_, err := st.JS.CreateConsumer(ctx, st.Config.ResultsStream, jetstream.ConsumerConfig{Durable: ResultsConsumer,
						FilterSubject: st.Subjects.Result("*", "*"), AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 7})
					return err
				}, jetstream.ErrConsumerExists},
				{"migrateResults: Stream of none", func() error { _, err := st.JS.Stream(ctx, "NONE"); return err }, jetstream.ErrStreamNotFound},
			} {
				require.ErrorIs(t, c.call(), c.want, c.site)
			}
			// ingress objectStoreFull: a full bucket refuses with
			// JSStreamStoreFailedF, err_code 10077.
			_, err = objects.Put(ctx, obs, "ns/z/payload", make([]byte, 2<<20), 1<<20)
			var apiErr *jetstream.APIError
			require.ErrorAs(t, err, &apiErr)
			require.EqualValues(t, 10077, apiErr.ErrorCode, "%v", err)
		})
	}
}
