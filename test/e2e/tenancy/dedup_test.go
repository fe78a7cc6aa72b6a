package tenancy

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
)

// TestWorkerCannotSuppressInvocations: JetStream deduplicates Nats-Msg-Id
// across a whole stream. A hostile tenant's worker, connected through the
// real callout with its own Pod's token, publishes "results" carrying the
// message IDs the queue will use for another tenant's next invocation (the
// invocation, its dispatch, its result). The victim's invocation is still
// stored (not a duplicate), dispatched to the victim's real sidecar and
// answered: worker results live in a stream of their own, where no queue
// message is deduplicated.
func TestWorkerCannotSuppressInvocations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tenant(t, "nats-v", "worker")
	tenant(t, "nats-m", "worker")
	victimPod := poolPod(t, "nats-v", "echo")
	malloryPod := poolPod(t, "nats-m", "echo")
	q := startQueueNATS(t, ctx, withIngress("nats-v"))
	const id = "job-42"

	nc, violations := q.connectWorker(t, "nats-m", "echo", malloryPod)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	for _, msgID := range []string{messages.MsgID("nats-v", id), messages.DispatchPublishID("nats-v", id, 1), messages.DispatchMsgID("nats-v", id, 1)} {
		m := nats.NewMsg(q.subj.Result("nats-m", "echo"))
		m.Data = []byte(`{}`)
		_, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(msgID))
		require.NoError(t, err, "mallory may publish on her own result subject")
	}
	select {
	case err := <-violations:
		require.NoError(t, err, "a violation on mallory's own result subject")
	default:
	}

	runSidecar(t, ctx, q, "nats-v", "echo", victimPod)
	assert.False(t, q.submit(t, "nats-v", "echo", id), "the victim's invocation was taken for a duplicate of mallory's message")

	rec := q.finished(t, "nats-v", id)
	require.Equal(t, messages.StateSucceeded, rec.State, "%+v", rec)
	require.NotNil(t, rec.Response)
	assert.JSONEq(t, `{"prompt":"hello"}`, string(rec.Response.Body))
	assert.Equal(t, victimPod.Name, rec.Worker)
}
