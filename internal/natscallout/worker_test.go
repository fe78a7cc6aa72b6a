package natscallout

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/objects"
	"github.com/runplane/runplane/test/natsauth"
)

// testLayout is a namespaced subject layout of the shape the queue uses.
func testLayout(id Identity) WorkerSubjects {
	scope := id.Namespace + "." + id.Pool
	return WorkerSubjects{
		Stream:   "RS",
		Consumer: id.Namespace + "_" + id.Pool + "_" + id.Worker,
		Dispatch: "rs.dispatch." + scope + "." + id.Worker,
		Cancel:   "rs.cancel." + scope + "." + id.Worker,
		Publish:  []string{"rs.result." + scope, "rs.metrics." + scope},
		Replies:  "_RS_REPLY." + scope + ".>",
		Inbox:    "_INBOX." + scope + "." + id.Worker,
		// The queue's shape: one bucket per namespace (objects.Bucket).
		ObjectBucket: objects.Bucket("RS", id.Namespace),
	}
}

// TestWorkerPermissionsOnJetStream runs the sidecar's JetStream calls with
// the permissions WorkerPermissions grants: all of them work, and the same
// calls aimed at another tenant's worker are refused by the server.
func TestWorkerPermissionsOnJetStream(t *testing.T) {
	srv, a := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice := Identity{Name: "team-a/echo-1", Namespace: "team-a", Pool: "echo", Worker: "echo-1", Expires: time.Now().Add(time.Hour)}
	internal, _, _ := serveCallout(t, ctx, srv, a, &Responder{
		MaxTTL: time.Hour, Clock: clock.RealClock{},
		Auth: tokens{"alice": alice},
	}, ServeOptions{})
	ijs, err := jetstream.New(internal)
	require.NoError(t, err)
	_, err = ijs.CreateStream(ctx, jetstream.StreamConfig{Name: "RS", Subjects: []string{"rs.dispatch.>"}})
	require.NoError(t, err)
	_, err = ijs.CreateStream(ctx, jetstream.StreamConfig{Name: "RS_RESULTS", Subjects: []string{"rs.result.>"}})
	require.NoError(t, err)

	own := testLayout(alice)
	bob := testLayout(Identity{Namespace: "team-b", Pool: "echo", Worker: "echo-1"})
	// Each pool's bucket holds a payload the queue stored.
	buckets := &objects.Buckets{JS: ijs, Cfg: objects.Config{StreamName: "RS", TTL: time.Hour}}
	refs := map[string]messages.ObjectRef{}
	for _, ns := range []string{"team-a", "team-b"} {
		obs, err := buckets.Ensure(ctx, ns)
		require.NoError(t, err)
		refs[ns], err = objects.Put(ctx, obs, objects.PayloadName(ns, "inv-1"), bytes.Repeat([]byte(ns), 100_000), 1<<20)
		require.NoError(t, err)
		require.Greater(t, refs[ns].Chunks, 1)
	}
	violations := make(chan error, 16)
	nc, err := nats.Connect(srv.ClientURL(), a.TLSOption(), nats.Token("alice"), nats.CustomInboxPrefix(own.Inbox),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.NewWithAPIPrefix(nc, api.WorkerJSAPIPrefix)
	require.NoError(t, err)

	t.Run("the sidecar's calls work", func(t *testing.T) {
		// The queue creates the consumer when it admits the worker; the
		// sidecar binds to it.
		_, err := ijs.CreateOrUpdateConsumer(ctx, own.Stream, jetstream.ConsumerConfig{
			Durable: own.Consumer, FilterSubject: own.Dispatch, AckPolicy: jetstream.AckExplicitPolicy,
		})
		require.NoError(t, err)
		cons, err := js.Consumer(ctx, own.Stream, own.Consumer)
		require.NoError(t, err)
		_, err = cons.Info(ctx)
		require.NoError(t, err)
		cancels, err := nc.SubscribeSync(own.Cancel)
		require.NoError(t, err)

		_, err = ijs.Publish(ctx, own.Dispatch, []byte("work"))
		require.NoError(t, err)
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		assert.Equal(t, "work", string(msg.Data()))
		require.NoError(t, msg.InProgress())
		ack, err := js.Publish(ctx, own.Publish[0], []byte("result"))
		require.NoError(t, err)
		assert.Equal(t, "RS_RESULTS", ack.Stream, "results go to their own stream")
		require.NoError(t, nc.Publish(own.Publish[1], []byte("heartbeat")))
		require.NoError(t, nc.Publish("_RS_REPLY.team-a.echo.caller-1", []byte("sync answer")))
		require.NoError(t, msg.DoubleAck(ctx))

		require.NoError(t, internal.Publish(own.Cancel, []byte("cancel")))
		_, err = cancels.NextMsg(5 * time.Second)
		require.NoError(t, err)

		// Its pool's objects: read the payload, store a result.
		payload, err := objects.Get(ctx, js, refs["team-a"], 0)
		require.NoError(t, err)
		assert.Equal(t, bytes.Repeat([]byte("team-a"), 100_000), payload)
		obs, err := js.ObjectStore(ctx, own.ObjectBucket)
		require.NoError(t, err)
		body := bytes.Repeat([]byte("result"), 100_000)
		ref, err := objects.Put(ctx, obs, objects.ResultName("team-a", "inv-1", 1), body, 1<<20)
		require.NoError(t, err)
		got, err := objects.Get(ctx, ijs, ref, 0)
		require.NoError(t, err)
		assert.Equal(t, body, got)
	})

	// Each attempt on another tenant's worker is refused; the server's
	// permission violation is the proof (a JetStream request that cannot
	// be published also times out on the client).
	attempts := []natsauth.Attempt{
		{Name: "consumer on another worker's dispatches", Want: "$RP.JS.API.CONSUMER.CREATE.RS.team-a_echo_echo-1.rs.dispatch.team-b.echo.echo-1",
			Try: func(ctx context.Context) error {
				_, err := js.CreateOrUpdateConsumer(ctx, "RS", jetstream.ConsumerConfig{Durable: own.Consumer, FilterSubject: bob.Dispatch})
				return err
			}},
		{Name: "update its own consumer", Want: "$RP.JS.API.CONSUMER.CREATE.RS.team-a_echo_echo-1.rs.dispatch.team-a.echo.echo-1",
			Try: func(ctx context.Context) error {
				_, err := js.UpdateConsumer(ctx, "RS", jetstream.ConsumerConfig{Durable: own.Consumer, FilterSubject: own.Dispatch,
					AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1})
				return err
			}},
		{Name: "delete its own consumer", Want: "$RP.JS.API.CONSUMER.DELETE.RS.team-a_echo_echo-1",
			Try: func(ctx context.Context) error { return js.DeleteConsumer(ctx, "RS", own.Consumer) }},
		{Name: "ephemeral consumer", Want: "$RP.JS.API.CONSUMER.CREATE.RS",
			Try: func(ctx context.Context) error {
				_, err := js.CreateOrUpdateConsumer(ctx, "RS", jetstream.ConsumerConfig{FilterSubject: own.Dispatch})
				return err
			}},
		{Name: "pull from another worker's consumer", Want: "$JS.API.CONSUMER.MSG.NEXT.RS.team-b_echo_echo-1",
			Try: func(ctx context.Context) error {
				_, err := nc.Request("$JS.API.CONSUMER.MSG.NEXT.RS."+bob.Consumer, []byte(`{"batch":1}`), time.Second)
				return err
			}},
		{Name: "read the stream", Want: "$RP.JS.API.STREAM.INFO.RS",
			Try: func(ctx context.Context) error { _, err := js.Stream(ctx, "RS"); return err }},
		{Name: "publish another tenant's result", Want: "rs.result.team-b.echo",
			Try: func(context.Context) error { return nc.Publish(bob.Publish[0], []byte("forged")) }},
		{Name: "answer another tenant's caller", Want: "_RS_REPLY.team-b.echo.caller-1",
			Try: func(context.Context) error { return nc.Publish("_RS_REPLY.team-b.echo.caller-1", []byte("forged")) }},
		{Name: "listen to another worker's cancels", Want: "rs.cancel.team-b.echo.echo-1",
			Try: func(context.Context) error { _, err := nc.SubscribeSync(bob.Cancel); return err }},
		{Name: "open another namespace's bucket", Want: "$RP.JS.API.STREAM.INFO.OBJ_RS_OBJ_team-b",
			Try: func(ctx context.Context) error { _, err := js.ObjectStore(ctx, bob.ObjectBucket); return err }},
		{Name: "read another namespace's payload", Want: "$JS.API.DIRECT.GET.OBJ_RS_OBJ_team-b",
			Try: func(ctx context.Context) error {
				_, err := nc.Request("$JS.API.DIRECT.GET.OBJ_"+bob.ObjectBucket, []byte(`{"seq":1}`), time.Second)
				return err
			}},
		{Name: "read another namespace's object metadata", Want: "$JS.API.DIRECT.GET.OBJ_RS_OBJ_team-b.$O.RS_OBJ_team-b.M.",
			Try: func(ctx context.Context) error {
				_, err := nc.Request("$JS.API.DIRECT.GET.OBJ_"+bob.ObjectBucket+".$O."+bob.ObjectBucket+".M.x", nil, time.Second)
				return err
			}},
		{Name: "write into another namespace's bucket", Want: "$O.RS_OBJ_team-b.C." + refs["team-b"].NUID,
			Try: func(ctx context.Context) error {
				return nc.Publish("$O."+bob.ObjectBucket+".C."+refs["team-b"].NUID, []byte("forged"))
			}},
		{Name: "consumer on its own bucket", Want: "$RP.JS.API.CONSUMER.CREATE.OBJ_RS_OBJ_team-a",
			Try: func(ctx context.Context) error {
				_, err := js.CreateOrUpdateConsumer(ctx, "OBJ_"+own.ObjectBucket, jetstream.ConsumerConfig{FilterSubject: "$O." + own.ObjectBucket + ".C.>"})
				return err
			}},
		{Name: "purge its own bucket", Want: "$JS.API.STREAM.PURGE.OBJ_RS_OBJ_team-a",
			Try: func(ctx context.Context) error {
				_, err := nc.Request("$JS.API.STREAM.PURGE.OBJ_"+own.ObjectBucket, nil, time.Second)
				return err
			}},
		{Name: "listen to another tenant's inbox", Want: "_INBOX.team-b.>",
			Try: func(context.Context) error { _, err := nc.SubscribeSync("_INBOX.team-b.>"); return err }},
	}
	natsauth.RequireRefused(ctx, t, nc, violations, attempts)
}

// stage is the setting of every attack of one tenant's worker on
// another's: a server whose callout admits mallory (team-m), the queue's
// connection, and bob's (team-b) cancel subject watched.
type stage struct {
	srv      *server.Server
	a        natsauth.Auth
	internal *nats.Conn
	ijs      jetstream.JetStream
	own, bob WorkerSubjects
	victim   *nats.Subscription
}

func newStage(t *testing.T, ctx context.Context) *stage {
	t.Helper()
	srv, a := startServer(t)
	mallory := Identity{Name: "team-m/echo-1", Namespace: "team-m", Pool: "echo", Worker: "echo-1", Expires: time.Now().Add(time.Hour)}
	internal, _, _ := serveCallout(t, ctx, srv, a, &Responder{MaxTTL: time.Hour, Clock: clock.RealClock{}, Auth: tokens{"mallory": mallory}}, ServeOptions{})
	ijs, err := jetstream.New(internal)
	require.NoError(t, err)
	bob := testLayout(Identity{Namespace: "team-b", Pool: "echo", Worker: "echo-1"})
	victim, err := internal.SubscribeSync(bob.Cancel)
	require.NoError(t, err)
	require.NoError(t, internal.Flush())
	return &stage{srv: srv, a: a, internal: internal, ijs: ijs, own: testLayout(mallory), bob: bob, victim: victim}
}

// connectMallory connects with mallory's token as her sidecar does; the
// server's permission violations arrive on the channel.
func (s *stage) connectMallory(t *testing.T) (*nats.Conn, <-chan error) {
	t.Helper()
	violations := make(chan error, 16)
	nc, err := dial(s.srv.ClientURL(), s.a.TLSOption(), nats.Token("mallory"), nats.CustomInboxPrefix(s.own.Inbox),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc, violations
}

// TestWorkerCannotCreateConsumers: nats-server does not check a consumer's
// deliver subject against its creator's permissions, so a worker allowed
// to create even its own consumer could create a push consumer delivering
// to another tenant's cancel subject. Every consumer create is refused,
// the consumer does not exist, and nothing but the marker reaches the
// victim's subject.
func TestWorkerCannotCreateConsumers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := newStage(t, ctx)
	ijs, own, bob, victim, internal := st.ijs, st.own, st.bob, st.victim, st.internal
	_, err := ijs.CreateStream(ctx, jetstream.StreamConfig{Name: "RS", Subjects: []string{"rs.dispatch.>"}})
	require.NoError(t, err)
	// Something the push consumer would deliver.
	_, err = ijs.Publish(ctx, own.Dispatch, []byte("dispatch"))
	require.NoError(t, err)
	nc, violations := st.connectMallory(t)
	js, err := jetstream.NewWithAPIPrefix(nc, api.WorkerJSAPIPrefix)
	require.NoError(t, err)

	actx, acancel := context.WithTimeout(ctx, time.Second)
	defer acancel()
	_, _ = js.CreateOrUpdateConsumer(actx, own.Stream, jetstream.ConsumerConfig{
		Durable: own.Consumer, FilterSubject: own.Dispatch, DeliverSubject: bob.Cancel, AckPolicy: jetstream.AckNonePolicy,
	}) // refused asynchronously: the violation below is the verdict
	require.NoError(t, nc.Flush())
	select {
	case err := <-violations:
		require.ErrorContains(t, err, "Permissions Violation")
		require.ErrorContains(t, err, api.WorkerJSAPIPrefix+".CONSUMER.CREATE.RS."+own.Consumer)
	case <-ctx.Done():
		t.Fatal("no permission violation")
	}
	_, err = ijs.Consumer(ctx, own.Stream, own.Consumer)
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound, "the worker's consumer must not exist")
	require.NoError(t, internal.Publish(bob.Cancel, []byte("marker")))
	first, err := victim.NextMsg(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "marker", string(first.Data), "only the marker reaches the victim's cancel subject")
}

// TestReplySubjectsStayInTheWorkersAccount is the reply-redirection attack:
// nats-server answers a JetStream request (here a direct get of a message
// the worker stored in its own bucket, headers and all) on whatever reply
// subject the requester names, with JetStream's authority, and checks the
// requester's permissions against the request subject only. Aimed at
// another tenant's Record key, the stored message forges it, deletes it
// (KV-Operation: DEL) or purges every Record (Nats-Rollup: all); aimed at
// another worker's cancel subject, it cancels that worker's call. Each
// attack is run by the worker from its own account, where the reply lands
// in that account and harms nothing, and by a user of RUNPLANE, how every
// worker was placed before accounts, where each one does harm.
func TestReplySubjectsStayInTheWorkersAccount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := newStage(t, ctx)
	srv, a, ijs, own, bob, victim, internal := st.srv, st.a, st.ijs, st.own, st.bob, st.victim, st.internal
	buckets := &objects.Buckets{JS: ijs, Cfg: objects.Config{StreamName: "RS", TTL: time.Hour}}
	_, err := buckets.Ensure(ctx, "team-m")
	require.NoError(t, err)
	// The victims: team-b's Records (a KV bucket of the shape the queue
	// keeps) and team-b's worker's cancel subject.
	records, err := ijs.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "RECORDS"})
	require.NoError(t, err)
	const bobKey, bobRecord = "team-b.inv-1", `{"state":"running"}`

	asQueue, err := a.QueueOption()
	require.NoError(t, err)
	attackers := []struct {
		name    string
		connect func() (*nats.Conn, jetstream.JetStream, string, error)
		harms   bool
	}{
		{name: "a worker in its own account", connect: func() (*nats.Conn, jetstream.JetStream, string, error) {
			nc, err := dial(srv.ClientURL(), a.TLSOption(), nats.Token("mallory"), nats.CustomInboxPrefix(own.Inbox))
			if err != nil {
				return nil, nil, "", err
			}
			js, err := jetstream.NewWithAPIPrefix(nc, api.WorkerJSAPIPrefix)
			return nc, js, api.WorkerJSAPIPrefix, err
		}},
		{name: "a user of RUNPLANE, as workers were", harms: true, connect: func() (*nats.Conn, jetstream.JetStream, string, error) {
			nc, err := nats.Connect(srv.ClientURL(), asQueue)
			if err != nil {
				return nil, nil, "", err
			}
			js, err := jetstream.New(nc)
			return nc, js, "$JS.API", err
		}},
	}
	attacks := []struct {
		name   string
		header nats.Header
		data   string
		reply  string
		harmed func(t *testing.T) bool
	}{
		{name: "forge another tenant's Record", data: `{"state":"succeeded","forged":true}`, reply: "$KV.RECORDS." + bobKey,
			harmed: func(t *testing.T) bool {
				e, err := records.Get(ctx, bobKey)
				return err != nil || string(e.Value()) != bobRecord
			}},
		{name: "delete another tenant's Record", header: nats.Header{"KV-Operation": {"DEL"}}, reply: "$KV.RECORDS." + bobKey,
			harmed: func(t *testing.T) bool { _, err := records.Get(ctx, bobKey); return err != nil }},
		{name: "purge every tenant's Records", header: nats.Header{"Nats-Rollup": {"all"}}, data: "{}", reply: "$KV.RECORDS.team-m.inv-9",
			harmed: func(t *testing.T) bool { _, err := records.Get(ctx, bobKey); return err != nil }},
		{name: "cancel another tenant's call", data: "cancel", reply: bob.Cancel,
			harmed: func(t *testing.T) bool {
				// Whatever reached the victim comes before the marker.
				require.NoError(t, internal.Publish(bob.Cancel, []byte("marker")))
				first, err := victim.NextMsg(5 * time.Second)
				require.NoError(t, err)
				return string(first.Data) != "marker"
			}},
	}
	for _, who := range attackers {
		t.Run(who.name, func(t *testing.T) {
			nc, js, apiPrefix, err := who.connect()
			require.NoError(t, err)
			defer nc.Close()
			obs, err := js.ObjectStore(ctx, own.ObjectBucket)
			require.NoError(t, err)
			for i, at := range attacks {
				t.Run(at.name, func(t *testing.T) {
					_, err := records.Put(ctx, bobKey, []byte(bobRecord))
					require.NoError(t, err)
					for n, _, _ := victim.Pending(); n > 0; n, _, _ = victim.Pending() {
						_, err := victim.NextMsg(time.Second)
						require.NoError(t, err)
					}
					// The weapon: a message in its own bucket, with the headers it chose.
					stored := &nats.Msg{Subject: fmt.Sprintf("$O.%s.C.attack-%d", own.ObjectBucket, i), Header: at.header, Data: []byte(at.data)}
					_, err = js.PublishMsg(ctx, stored)
					require.NoError(t, err)
					// A direct get of it, answered on the victim's subject.
					req := nats.NewMsg(apiPrefix + ".DIRECT.GET.OBJ_" + own.ObjectBucket)
					req.Data = []byte(`{"last_by_subj":"` + stored.Subject + `"}`)
					req.Reply = at.reply
					require.NoError(t, nc.PublishMsg(req))
					// The barrier: a direct get of its own on the same path is
					// answered, so the redirected one was served before it.
					_, err = obs.GetInfo(ctx, "absent")
					require.ErrorIs(t, err, jetstream.ErrObjectNotFound)
					if who.harms {
						// Each attack's own subject: the record update is
						// applied once the stream has stored it.
						require.Eventually(t, func() bool { return at.harmed(t) }, 5*time.Second, 10*time.Millisecond, "the attack works from RUNPLANE")
						return
					}
					assert.False(t, at.harmed(t), "the reply stayed in the worker's own account")
				})
			}
		})
	}
}

// TestServerSendsNothingOutsideWorkerPermissions: nats-server sends some
// messages on a client's behalf: trace events to the subject a message's
// Nats-Trace-Dest header names, and JetStream's publish ack to the
// message's reply subject. nats-server v2.12.4 checked neither against
// the worker's permissions: a worker could have trace events published on
// another tenant's cancel subject (this test's victim got one there;
// CVE-2026-33249: checked in v2.12.15 and every v2.15), and could aim a publish
// ack at a JetStream API subject (v2.12.4's JetStream dropped it as a
// request without client info; v2.15.3 refuses any $JS. reply from a
// client before that). Both are refused, and neither the victim's subject
// nor the stream sees anything.
func TestServerSendsNothingOutsideWorkerPermissions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := newStage(t, ctx)
	ijs, own, bob, victim, internal := st.ijs, st.own, st.bob, st.victim, st.internal
	invocations, err := ijs.CreateStream(ctx, jetstream.StreamConfig{Name: "RS", Subjects: []string{"rs.dispatch.>"}})
	require.NoError(t, err)
	_, err = ijs.CreateStream(ctx, jetstream.StreamConfig{Name: "RS_RESULTS", Subjects: []string{"rs.result.>"}})
	require.NoError(t, err)
	_, err = ijs.Publish(ctx, bob.Dispatch, []byte("bob's invocation"))
	require.NoError(t, err)
	nc, violations := st.connectMallory(t)

	for _, tc := range []struct {
		name string
		msg  *nats.Msg
		want string
	}{
		{name: "trace events to another tenant's cancels",
			msg:  &nats.Msg{Subject: own.Publish[0], Header: nats.Header{"Nats-Trace-Dest": {bob.Cancel}}, Data: []byte("result")},
			want: `Permissions Violation for Publish to "` + bob.Cancel + `"`},
		{name: "publish ack as a purge of the invocation stream",
			msg:  &nats.Msg{Subject: own.Publish[0], Reply: "$JS.API.STREAM.PURGE.RS", Data: []byte("result")},
			want: `Permissions Violation for Publish with Reply of "$JS.API.STREAM.PURGE.RS"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, nc.PublishMsg(tc.msg)) // refused asynchronously: the violation below is the verdict
			require.NoError(t, nc.Flush())
			select {
			case err := <-violations:
				require.ErrorContains(t, err, tc.want)
			case <-time.After(5 * time.Second):
				t.Error("no permission violation")
			}
		})
	}
	require.NoError(t, internal.Publish(bob.Cancel, []byte("marker")))
	first, err := victim.NextMsg(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "marker", string(first.Data), "only the marker reaches the victim's cancel subject")
	info, err := invocations.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(1), info.State.Msgs, "the invocation stream keeps bob's invocation")
}
