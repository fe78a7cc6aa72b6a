package queue_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/stream"
)

// TestRepostOfHashlessQueuedRecordRefused: a Record the activator
// re-created from the stored message (no requestHash), queued at attempt
// 0. A re-post of its ID with another payload cannot be compared with what
// was accepted: it is refused with 409 naming the reason, and nothing is
// published on the pool's invoke subject.
func TestRepostOfHashlessQueuedRecordRefused(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	// After the rebuild, which drops queued Records without a message.
	require.Eventually(t, func() bool {
		m, err := e.metrics()
		return err == nil && strings.Contains(m, "runplane_activator_rebuilt 1")
	}, 10*time.Second, 10*time.Millisecond, "the activator rebuilt")
	sc := e.cfg.Stream.WithDefaults()
	kv, err := e.js.KeyValue(ctx, sc.RecordsBucket)
	require.NoError(t, err)
	const id = "recreated"
	rec := messages.Record{InvocationID: id, Namespace: "default", Pool: testPool, Mode: messages.ModeAsync, State: messages.StateQueued,
		Stream: sc.Stream, AcceptedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC()}
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	_, err = kv.Create(ctx, stream.Key("default", id), b)
	require.NoError(t, err)
	st, err := e.js.Stream(ctx, sc.Stream)
	require.NoError(t, err)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(e.subj.Invoke("default", testPool)))
	require.NoError(t, err)
	before := info.State.Subjects[e.subj.Invoke("default", testPool)]

	r := e.invoke(map[string]any{"mode": "async", "invocationID": id, "payload": "replaced"})
	require.Equal(t, http.StatusConflict, r.code, string(r.raw))
	assert.Contains(t, string(r.raw), "no request hash")
	info, err = st.Info(ctx, jetstream.WithSubjectFilter(e.subj.Invoke("default", testPool)))
	require.NoError(t, err)
	assert.Equal(t, before, info.State.Subjects[e.subj.Invoke("default", testPool)], "the re-post was published")
}
