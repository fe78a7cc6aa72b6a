package localworkers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/natsauth"
)

var env *cluster.Cluster

func TestMain(m *testing.M) {
	cluster.Main(m, cluster.Options{Nodes: []cluster.Node{{Name: "kwok-0"}}}, func(c *cluster.Cluster) { env = c })
}

func TestWorkerFollowsPod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := natsauth.JetStream(t, nil)
	nc := natsauth.Connect(t, srv.ClientURL())
	js, _ := jetstream.New(nc)
	subj := messages.Subjects{Prefix: api.DefaultSubjectPrefix}
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: api.DefaultStreamName, Subjects: subj.StreamSubjects()})
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: messages.ResultsStreamName(api.DefaultStreamName), Subjects: subj.ResultStreamSubjects()})
	require.NoError(t, err)
	events := make(chan messages.Event, 100)
	_, err = nc.Subscribe(subj.Metrics("lw", "lw")+".*", func(m *nats.Msg) {
		var e messages.Event
		if json.Unmarshal(m.Data, &e) == nil {
			events <- e
		}
	})
	require.NoError(t, err)
	results := make(chan messages.Result, 10)
	_, err = nc.Subscribe(subj.Result("lw", "lw"), func(m *nats.Msg) {
		var r messages.Result
		if json.Unmarshal(m.Data, &r) == nil {
			results <- r
		}
	})
	require.NoError(t, err)

	binDir := t.TempDir()
	scBin, fwBin, err := BuildBinaries(ctx, binDir)
	require.NoError(t, err)
	require.NoError(t, env.CreateNamespace(ctx, "lw"))
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	r, err := Start(runCtx, Config{
		Client: env.Client(), NATSURL: srv.ClientURL(), SidecarBinary: scBin, FrameworkBinary: fwBin,
		SidecarArgs: []string{"-heartbeat-interval", "500ms", "-probe-interval", "100ms", "-fetch-wait", "300ms"},
		Namespace:   "lw", StopGrace: 10 * time.Second, Logf: t.Logf, Dir: t.TempDir(),
	})
	require.NoError(t, err)

	// Sidecars with a NATS token bind to the consumer the queue's auth
	// callout creates when it admits them; this NATS has no callout.
	_, err = js.CreateOrUpdateConsumer(ctx, api.DefaultStreamName, jetstream.ConsumerConfig{
		Durable: messages.ConsumerName("lw", "lw", "lw-0"), FilterSubject: subj.Dispatch("lw", "lw", "lw-0"),
		AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	require.NoError(t, err)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "lw-0", Namespace: "lw", Labels: map[string]string{api.LabelPool: "lw"},
			Annotations: map[string]string{api.AnnotationConcurrency: "2"}},
		Spec: corev1.PodSpec{NodeName: "kwok-0", Containers: []corev1.Container{{Name: "app", Image: "framework"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	}
	_, err = env.Client().CoreV1().Pods("lw").Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	wait := func(what string, match func(messages.Event) bool) {
		t.Helper()
		for {
			select {
			case e := <-events:
				if match(e) {
					return
				}
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s (workers %v)", what, r.Workers())
			}
		}
	}
	wait("ready worker lw-0", func(e messages.Event) bool {
		return e.Worker == "lw-0" && e.Namespace == "lw" && e.Concurrency == 2 && e.Ready
	})
	addr, ok := r.SidecarAddr("lw", "lw-0")
	require.True(t, ok, "no sidecar address for lw-0")
	resp, err := http.Get("http://" + addr + "/readyz")
	require.NoError(t, err, "/readyz of lw-0")
	require.Equal(t, http.StatusOK, resp.StatusCode, "/readyz of lw-0")
	resp.Body.Close()

	d, _ := json.Marshal(messages.Dispatch{Invocation: messages.Invocation{InvocationID: "i1", Namespace: "lw", Pool: "lw", Mode: messages.ModeAsync}, Worker: "lw-0", Attempt: 1})
	_, err = js.Publish(ctx, subj.Dispatch("lw", "lw", "lw-0"), d, jetstream.WithMsgID("i1.1"))
	require.NoError(t, err)
	select {
	case res := <-results:
		var body map[string]any
		_ = json.Unmarshal(res.Response.Body, &body)
		assert.Equal(t, messages.StateSucceeded, res.State)
		assert.Equal(t, "lw-0", body["workerName"])
		assert.Equal(t, "lw", body["workerNamespace"])
	case <-ctx.Done():
		t.Fatal("no result")
	}

	require.NoError(t, env.Client().CoreV1().Pods("lw").Delete(ctx, "lw-0", metav1.DeleteOptions{}))
	wait("deregistered", func(e messages.Event) bool { return e.Worker == "lw-0" && e.Type == messages.EventDeregistered })
	require.Eventually(t, func() bool { return len(r.Workers()) == 0 }, 30*time.Second, 50*time.Millisecond, "workers left after delete")
	stopRun()
	r.Wait()
	assert.FileExists(t, fmt.Sprintf("%s/lw_lw-0/sidecar.log", r.cfg.Dir), "sidecar log")
}
