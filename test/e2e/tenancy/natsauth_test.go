package tenancy

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/queuetest"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/test/natsauth"
	"github.com/runplane/runplane/test/scrape"
)

// queueNATS is a real nats-server configured as make dev and the chart
// configure it (the queue the one user, everyone else through the auth
// callout), with the real queue service serving the callout.
type queueNATS struct {
	srv      *server.Server
	auth     natsauth.Auth
	internal *nats.Conn // the queue's own user
	subj     messages.Subjects
	stream   string
	// ingress is the ingress's base URL when withIngress was given, and
	// metricsURL its /metrics, which scrapers read.
	ingress    string
	metricsURL string
	scrapers   scrape.Scrapers
}

// withIngress also serves the queue's ingress (caller authentication off)
// and runs its activator for the pools of namespace ns.
func withIngress(ns string) func(*queue.Config) {
	return func(c *queue.Config) {
		c.DisableIngress, c.InsecureDisableCallerAuth, c.Namespace, c.Listen = false, true, ns, "127.0.0.1:0"
		c.MetricsListen = "127.0.0.1:0"
	}
}

func startQueueNATS(t *testing.T, ctx context.Context, opts ...func(*queue.Config)) *queueNATS {
	t.Helper()
	return startQueueNATSConf(t, ctx, "", "", opts...)
}

// startQueueNATSConf is startQueueNATS with more nats-server configuration:
// jsConf inside the jetstream block, topConf at the top level.
func startQueueNATSConf(t *testing.T, ctx context.Context, jsConf, topConf string, opts ...func(*queue.Config)) *queueNATS {
	t.Helper()
	srv, auth := queuetest.CalloutNATS(t, natsauth.Extra{JetStream: jsConf, Top: topConf})

	sc := stream.Config{}.WithDefaults()
	qcfg := queue.Config{NATS: queue.NATS{URL: srv.ClientURL(), TrustFile: auth.TrustFile, Client: auth.Client},
		RESTConfig: env.RESTConfig(), Namespace: "natsauth-none", DisableIngress: true}
	for _, o := range opts {
		o(&qcfg)
	}
	run := queuetest.Run(t, qcfg)
	asQueue, err := auth.QueueOption()
	require.NoError(t, err)
	internal, err := nats.Connect(srv.ClientURL(), asQueue)
	require.NoError(t, err)
	t.Cleanup(internal.Close)
	js, err := jetstream.New(internal)
	require.NoError(t, err)
	// The queue creates the stream, then serves the callout: a worker can
	// connect once the callout's subscription is there.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := js.Stream(ctx, sc.Stream)
		require.NoError(c, err)
	}, 30*time.Second, 50*time.Millisecond, "the queue's stream")
	require.Eventually(t, func() bool {
		subs, err := srv.Subsz(&server.SubszOptions{Subscriptions: true, Test: "$SYS.REQ.USER.AUTH", Account: auth.Trust.Runplane.Pub})
		return err == nil && subs.Total > 0
	}, 30*time.Second, 50*time.Millisecond, "the queue's callout")
	q := &queueNATS{srv: srv, auth: auth, internal: internal, subj: messages.Subjects{Prefix: sc.Prefix}, stream: sc.Stream}
	q.ingress, q.metricsURL = run.Base, run.MetricsURL
	if qcfg.MetricsListen != "" {
		q.scrapers, err = scrape.New(ctx, env)
		require.NoError(t, err)
	}
	return q
}

// connect presents token as a sidecar does, its violations on the channel.
func (q *queueNATS) connect(token, inbox string) (*nats.Conn, <-chan error, error) {
	violations := make(chan error, 16)
	opts := []nats.Option{q.auth.TLSOption(), nats.Token(token), nats.NoReconnect(), nats.Timeout(10 * time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err })}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	nc, err := nats.Connect(q.srv.ClientURL(), opts...)
	return nc, violations, err
}

// TestSidecarNATSIdentity runs the real queue's auth callout on a real
// nats-server against the real apiserver: a worker's Pod-bound token gives
// it its own subjects and nothing else (the server's permission violation
// is the proof), and every token that is not a live pool Pod's is refused.
func TestSidecarNATSIdentity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tenant(t, "nats-a", "worker")
	tenant(t, "nats-b", "worker")
	podA := poolPod(t, "nats-a", "echo")
	podB := poolPod(t, "nats-b", "echo")
	q := startQueueNATS(t, ctx)
	audience := []string{api.NATSTokenAudience}
	ns, pool, w := "nats-a", "echo", podA.Name

	nc, violations, err := q.connect(token(t, ns, "worker", audience, bound(podA)), messages.WorkerInbox(ns, pool, w))
	require.NoError(t, err, "the worker's own token")
	defer nc.Close()
	js, err := jetstream.NewWithAPIPrefix(nc, api.WorkerJSAPIPrefix)
	require.NoError(t, err)
	ijs, err := jetstream.New(q.internal)
	require.NoError(t, err)

	t.Run("the sidecar's own calls work", func(t *testing.T) {
		// The callout created the worker's consumer before admitting it:
		// the worker binds to it.
		cons, err := js.Consumer(ctx, q.stream, messages.ConsumerName(ns, pool, w))
		require.NoError(t, err)
		cancels, err := nc.SubscribeSync(q.subj.Cancel(ns, pool, w))
		require.NoError(t, err)
		require.NoError(t, nc.Flush())
		_, err = ijs.Publish(ctx, q.subj.Dispatch(ns, pool, w), []byte("work"))
		require.NoError(t, err)
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		assert.Equal(t, "work", string(msg.Data()))
		results, err := q.internal.SubscribeSync(q.subj.Result(ns, pool))
		require.NoError(t, err)
		require.NoError(t, q.internal.Flush())
		_, err = js.Publish(ctx, q.subj.Result(ns, pool), []byte("result"))
		require.NoError(t, err)
		got, err := results.NextMsg(5 * time.Second)
		require.NoError(t, err)
		assert.Equal(t, "result", string(got.Data))
		require.NoError(t, nc.Publish(q.subj.Events(ns, pool, w), []byte("heartbeat")))
		require.NoError(t, nc.Publish(q.subj.Reply(ns, pool)+".replica-1.inv-1", []byte("sync answer")))
		require.NoError(t, msg.DoubleAck(ctx))
		require.NoError(t, q.internal.Publish(q.subj.Cancel(ns, pool, w), []byte("cancel")))
		_, err = cancels.NextMsg(5 * time.Second)
		require.NoError(t, err)
		select {
		case err := <-violations:
			require.NoError(t, err, "a violation on the worker's own subjects")
		default:
		}
	})

	other := func(kind string) string { return q.subj.Prefix + "." + kind + ".nats-b.echo" }
	attempts := []natsauth.Attempt{
		{Name: "subscribe to another namespace's dispatches", Want: other("dispatch") + "." + podB.Name,
			Try: func(context.Context) error {
				_, err := nc.SubscribeSync(q.subj.Dispatch("nats-b", "echo", podB.Name))
				return err
			}},
		{Name: "subscribe to every dispatch", Want: q.subj.Prefix + ".dispatch.>",
			Try: func(context.Context) error { _, err := nc.SubscribeSync(q.subj.Prefix + ".dispatch.>"); return err }},
		{Name: "publish a fake result for another pool", Want: other("result"),
			Try: func(context.Context) error { return nc.Publish(q.subj.Result("nats-b", "echo"), []byte("forged")) }},
		{Name: "answer another tenant's sync caller", Want: other("reply") + ".replica-1.inv-1",
			Try: func(context.Context) error {
				return nc.Publish(q.subj.Reply("nats-b", "echo")+".replica-1.inv-1", []byte("forged"))
			}},
		{Name: "a consumer on another worker's dispatches", Want: api.WorkerJSAPIPrefix + ".CONSUMER.CREATE." + q.stream + "." + messages.ConsumerName(ns, pool, w),
			Try: func(ctx context.Context) error {
				_, err := js.CreateOrUpdateConsumer(ctx, q.stream, jetstream.ConsumerConfig{
					Durable: messages.ConsumerName(ns, pool, w), FilterSubject: q.subj.Dispatch("nats-b", "echo", podB.Name)})
				return err
			}},
		{Name: "a push consumer delivering to another tenant's cancels", Want: api.WorkerJSAPIPrefix + ".CONSUMER.CREATE." + q.stream + "." + messages.ConsumerName(ns, pool, w) + "." + q.subj.Dispatch(ns, pool, w),
			Try: func(ctx context.Context) error {
				_, err := js.CreateOrUpdateConsumer(ctx, q.stream, jetstream.ConsumerConfig{
					Durable: messages.ConsumerName(ns, pool, w), FilterSubject: q.subj.Dispatch(ns, pool, w),
					DeliverSubject: q.subj.Cancel("nats-b", "echo", podB.Name), AckPolicy: jetstream.AckNonePolicy})
				return err
			}},
		{Name: "delete its own consumer", Want: api.WorkerJSAPIPrefix + ".CONSUMER.DELETE." + q.stream + "." + messages.ConsumerName(ns, pool, w),
			Try: func(ctx context.Context) error {
				return js.DeleteConsumer(ctx, q.stream, messages.ConsumerName(ns, pool, w))
			}},
		{Name: "pull from another worker's consumer", Want: "$JS.API.CONSUMER.MSG.NEXT." + q.stream + "." + messages.ConsumerName("nats-b", "echo", podB.Name),
			Try: func(context.Context) error {
				_, err := nc.Request("$JS.API.CONSUMER.MSG.NEXT."+q.stream+"."+messages.ConsumerName("nats-b", "echo", podB.Name), []byte(`{"batch":1}`), time.Second)
				return err
			}},
		{Name: "list streams", Want: api.WorkerJSAPIPrefix + ".STREAM.NAMES",
			Try: func(ctx context.Context) error {
				names := js.StreamNames(ctx)
				for range names.Name() {
				}
				return names.Err()
			}},
		{Name: "read the invocation records bucket", Want: api.WorkerJSAPIPrefix + ".STREAM.INFO.KV_",
			Try: func(ctx context.Context) error {
				_, err := js.KeyValue(ctx, stream.Config{}.WithDefaults().RecordsBucket)
				return err
			}},
		{Name: "listen to another worker's inbox", Want: "_INBOX_RP.nats-b.>",
			Try: func(context.Context) error { _, err := nc.SubscribeSync("_INBOX_RP.nats-b.>"); return err }},
		{Name: "answer the auth callout", Want: "$SYS.REQ.USER.AUTH",
			Try: func(context.Context) error { _, err := nc.SubscribeSync("$SYS.REQ.USER.AUTH"); return err }},
	}
	natsauth.RequireRefused(ctx, t, nc, violations, attempts)

	t.Run("refused tokens", func(t *testing.T) {
		doomed := poolPod(t, "nats-b", "doomed")
		doomedToken := token(t, "nats-b", "worker", audience, bound(doomed))
		require.NoError(t, env.Client().AppsV1().Deployments("nats-b").Delete(ctx, "doomed", metav1.DeleteOptions{}))
		require.NoError(t, env.Client().CoreV1().Pods("nats-b").Delete(ctx, doomed.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err := env.Client().CoreV1().Pods("nats-b").Get(ctx, doomed.Name, metav1.GetOptions{})
			require.Error(c, err)
		}, 30*time.Second, 100*time.Millisecond, "the Pod gone")
		bare, err := env.Client().CoreV1().Pods("nats-b").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "impostor", Labels: map[string]string{api.LabelPool: "echo"}}, Spec: podSpec(),
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		good := token(t, "nats-b", "worker", audience, bound(podB))
		cases := map[string]string{
			"no token":                    "",
			"not bound to a Pod":          token(t, "nats-b", "worker", audience, nil),
			"bound to a deleted Pod":      doomedToken,
			"bound to a bare pool Pod":    token(t, "nats-b", "worker", audience, bound(bare)),
			"apiserver audience":          token(t, "nats-b", "worker", nil, bound(podB)),
			"forged (claims rewritten)":   forge(t, good),
			"forged (not a token at all)": "eyJhbGciOiJub25lIn0.e30.",
		}
		for name, tok := range cases {
			t.Run(name, func(t *testing.T) {
				nc, _, err := q.connect(tok, "")
				if err == nil {
					nc.Close()
				}
				require.Error(t, err)
				assert.Contains(t, strings.ToLower(err.Error()), "authorization violation")
			})
		}
	})
}

// forge rewrites the payload of a real token to name another Pod, keeping
// its signature: what a tenant holding one token could try.
func forge(t *testing.T, tok string) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	require.Len(t, parts, 3)
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	forged := strings.ReplaceAll(string(payload), "nats-b", "nats-a")
	require.NotEqual(t, string(payload), forged)
	return parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(forged)) + "." + parts[2]
}

// TestDeletedWorkerLosesNATS: a worker's NATS connection, admitted for its
// Pod-bound token, is closed within 10 s of its Pod being deleted (the
// activator sees the deletion and revokes the worker's account), and the
// token, still in the callout's admission cache, does not reconnect.
func TestDeletedWorkerLosesNATS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns, pool := "nats-revoke", "echo"
	tenant(t, ns, "worker")
	pod := poolPods(t, ns, pool, 1)[0]
	q := startQueueNATS(t, ctx, withIngress(ns))
	tok := token(t, ns, "worker", []string{api.NATSTokenAudience}, bound(pod))
	nc, _, err := q.connect(tok, messages.WorkerInbox(ns, pool, pod.Name))
	require.NoError(t, err, "the worker's own token")
	defer nc.Close()
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })

	deleted := time.Now()
	require.NoError(t, env.Client().CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	select {
	case <-closed:
		t.Logf("closed %s after the Pod's deletion", time.Since(deleted).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the deleted worker's NATS connection is still open 10 s later")
	}
	_, _, err = q.connect(tok, messages.WorkerInbox(ns, pool, pod.Name))
	require.Error(t, err, "the deleted Pod's token")
}
