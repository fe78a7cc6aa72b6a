package queue_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/pool"
)

// heldBody is a request body the client sends only when the test lets it:
// with Expect: 100-continue the client reads it once the ingress has
// started reading, so started closing means the ingress has taken the
// body's budget (taken before the body is read).
type heldBody struct {
	once    sync.Once
	started chan struct{}
	release chan struct{}
	r       *bytes.Reader
}

func newHeldBody(b []byte) *heldBody {
	return &heldBody{started: make(chan struct{}), release: make(chan struct{}), r: bytes.NewReader(b)}
}

func (h *heldBody) Read(p []byte) (int, error) {
	h.once.Do(func() { close(h.started) })
	<-h.release
	return h.r.Read(p)
}

// asyncBody is an async invocation's JSON body of exactly n bytes.
func asyncBody(t *testing.T, n int) []byte {
	head, tail := `{"mode":"async","payload":"`, `"}`
	b := []byte(head + strings.Repeat("x", n-len(head)-len(tail)) + tail)
	require.True(t, json.Valid(b))
	return b
}

// TestBodyBudget: the request bodies in flight on a replica are bounded
// per namespace and in all. A tenant's concurrent bodies beyond its share
// get 429 naming the limit while another tenant's body of the same size
// is accepted at that moment; a full replica refuses a namespace with room
// in its share; the bytes come back once the bodies are read (a later
// request is accepted), and nothing held is lost (every held request is
// accepted).
func TestBodyBudget(t *testing.T) {
	const size = 1 << 20
	e := newEnv(t, func(c *queue.Config) {
		c.StaticPools = []string{"team-a/p", "team-b/p"}
		// Bodies of at most ~2.3 MiB: the namespace share holds 3 of 1 MiB, the
		// replica 5.
		c.MaxPayloadBytes = size
		c.Limits = pool.Limits{NamespaceMaxBodyBytes: 3 * size, ReplicaMaxBodyBytes: 5 * size}
	})
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
	body := asyncBody(t, size)
	// post answers a request of ns's pool p with a body of size bytes (no
	// require here: it runs on goroutines of its own too).
	post := func(ns string, b io.Reader) (resp, error) {
		req, err := http.NewRequest("POST", e.base+invocations(ns, "p"), b)
		if err != nil {
			return resp{}, err
		}
		req.ContentLength = size
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Expect", "100-continue")
		r, err := client.Do(req)
		if err != nil {
			return resp{}, err
		}
		defer r.Body.Close()
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			return resp{}, err
		}
		out := resp{code: r.StatusCode, header: r.Header, raw: raw}
		return out, json.Unmarshal(raw, &out.body)
	}
	answer := func(ns string) resp {
		t.Helper()
		r, err := post(ns, bytes.NewReader(body))
		require.NoError(t, err, "%s", r.raw)
		return r
	}
	// hold sends n held bodies of namespace ns and waits until the ingress
	// has taken the budget of each.
	var held []*heldBody
	codes := make(chan int, 16)
	hold := func(ns string, n int) {
		for range n {
			h := newHeldBody(body)
			held = append(held, h)
			go func() {
				r, err := post(ns, h)
				if err != nil {
					r.code = -1
				}
				codes <- r.code
			}()
			select {
			case <-h.started:
			case code := <-codes: // the earlier held ones are blocked: this is it
				t.Fatalf("a held body of %s was answered %d before the ingress read it", ns, code)
			case <-time.After(30 * time.Second):
				t.Fatalf("the ingress never read a held body of %s", ns)
			}
		}
	}
	limited := func(r resp, ns, limit string, max int) {
		t.Helper()
		require.Equal(t, http.StatusTooManyRequests, r.code, "%s", r.raw)
		assert.Equal(t, limit, r.body["limit"])
		assert.Equal(t, ns, r.body["namespace"])
		assert.EqualValues(t, max, r.body["max"])
		assert.Equal(t, "1", r.header.Get("Retry-After"))
		assert.Contains(t, r.header.Get("Content-Type"), "application/problem+json")
	}

	// team-a takes its share; its next body is refused while team-b's is
	// accepted.
	hold("team-a", 3)
	limited(answer("team-a"), "team-a", "namespace_body_bytes", 3*size)
	r := answer("team-b")
	require.Equal(t, http.StatusAccepted, r.code, "%s", r.raw)

	// team-b fills the replica: its share has room, the replica has not.
	hold("team-b", 2)
	limited(answer("team-b"), "team-b", "replica_body_bytes", 5*size)

	// The held bodies are read and accepted: their bytes come back.
	for _, h := range held {
		close(h.release)
	}
	for range held {
		assert.Equal(t, http.StatusAccepted, <-codes)
	}
	r = answer("team-a")
	assert.Equal(t, http.StatusAccepted, r.code, "%s", r.raw)

	metrics, err := e.metrics()
	require.NoError(t, err)
	assert.Contains(t, metrics, `runplane_ingress_limited_total{namespace="team-a",reason="namespace_body_bytes"} 1`)
	assert.Contains(t, metrics, `runplane_ingress_limited_total{namespace="team-b",reason="replica_body_bytes"} 1`)
}
