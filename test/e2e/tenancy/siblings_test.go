package tenancy

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/test/scrape"
)

// TestWorkerCannotSpeakForSibling: two workers of one pool, each through
// the real callout with its own Pod's token. The victim's real sidecar runs
// an invocation; mallory, its sibling, publishes "deregistered, nothing in
// flight" Events for it, which would have the victim's running invocation
// requeued and run twice. NATS refuses them on the victim's Events subject
// and on the pool's root subject (permission violations); on mallory's own
// subject the activator refuses a body naming the victim (counted). The
// victim's invocation finishes once, on its first attempt.
func TestWorkerCannotSpeakForSibling(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, pool := "nats-s", "echo"
	tenant(t, ns, "worker")
	pods := poolPods(t, ns, pool, 2)
	victim, mallory := pods[0], pods[1]
	q := startQueueNATS(t, ctx, withIngress(ns))

	held := runHolding(t, ctx, q, ns, pool, victim)
	nc, violations := q.connectWorker(t, ns, pool, mallory)

	const id = "sibling-1"
	q.submit(t, ns, pool, id)
	held.waitStarted(t, ctx)

	forged, err := json.Marshal(messages.Event{Type: messages.EventDeregistered, Namespace: ns, Pool: pool, Worker: victim.Name,
		Concurrency: 1, InFlight: 0, At: time.Now().UTC()})
	require.NoError(t, err)
	for _, subject := range []string{q.subj.Events(ns, pool, victim.Name), q.subj.Metrics(ns, pool)} {
		require.NoError(t, nc.Publish(subject, forged))
		require.NoError(t, nc.Flush())
		requireViolation(t, violations, subject)
	}
	// Its own subject is allowed; the activator takes the worker from it
	// and refuses a body that names another.
	require.NoError(t, nc.Publish(q.subj.Events(ns, pool, mallory.Name), forged))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool {
		code, body, err := scrape.Get(q.metricsURL, q.scrapers.Reader)
		return err == nil && code == http.StatusOK && strings.Contains(body, `runplane_activator_foreign_messages_total{kind="event"} 1`)
	}, 30*time.Second, 50*time.Millisecond, "the activator did not refuse the event naming the victim")
	select {
	case err := <-violations:
		require.NoError(t, err, "a violation on mallory's own Events subject")
	default:
	}

	close(held.release)
	rec := q.finished(t, ns, id)
	assert.Equal(t, messages.StateSucceeded, rec.State, "%+v", rec)
	assert.Equal(t, victim.Name, rec.Worker)
	assert.Equal(t, 1, rec.Attempt, "the victim's invocation was dispatched again")
	assert.EqualValues(t, 1, held.runs.Load(), "the victim's invocation ran more than once")
}
