package callback

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
)

// uids is a Namespaces of fixed UIDs (absent: the namespace is gone).
type uids map[string]string

func (u uids) UID(_ context.Context, ns string, _ bool) (string, error) {
	if id, ok := u[ns]; ok {
		return id, nil
	}
	return "", fmt.Errorf("namespace %q: %w", ns, ErrNoNamespace)
}

// TestDeliverSignsWithTheRecordedNamespaceKey: a callback is signed with
// the key of the namespace that accepted the invocation (its Record's
// keyID), even when a namespace of that name with another UID exists now;
// one recorded before keys followed the UID is signed with the current
// key and the old name-only one, or the old one alone when its namespace
// is gone.
func TestDeliverSignsWithTheRecordedNamespaceKey(t *testing.T) {
	st := startStore(t)
	type post struct {
		deliv, sig string
		body       []byte
	}
	got := make(chan post, 8)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- post{r.Header.Get(DeliveryHeader), r.Header.Get(SignatureHeader), b}
	}))
	t.Cleanup(rc.Close)
	ctx := context.Background()
	now := time.Now()
	for _, r := range []struct{ ns, id, keyID string }{{"team-a", "old-owner", "uid-1"}, {"team-a", "before-upgrade", ""}, {"gone", "before-upgrade", ""}} {
		_, err := st.Create(ctx, messages.Record{InvocationID: r.id, Namespace: r.ns, Pool: "echo", Mode: messages.ModeAsync, State: messages.StateSucceeded,
			AcceptedAt: now, UpdatedAt: now, Callback: &messages.CallbackStatus{URL: rc.URL, KeyID: r.keyID, State: messages.CallbackPending}})
		require.NoError(t, err)
	}
	runDeliverer(t, Config{Store: st, Namespaces: uids{"team-a": "uid-2"}}) // team-a was made again

	posts := map[string]post{}
	for range 3 {
		select {
		case p := <-got:
			posts[p.deliv] = p
		case <-time.After(time.Minute):
			require.FailNow(t, "callbacks not delivered", "%v", posts)
		}
	}
	verify := func(deliv string, key []byte) error {
		p, ok := posts[deliv]
		require.True(t, ok, deliv)
		return Verify(key, p.sig, p.body, time.Now(), 5*time.Minute)
	}
	old, cur := NamespaceKey(testMaster, "team-a", "uid-1"), NamespaceKey(testMaster, "team-a", "uid-2")
	require.NoError(t, verify("team-a/old-owner/succeeded", old))
	assert.Error(t, verify("team-a/old-owner/succeeded", cur), "the namespace's new owner cannot verify (nor forge) the old one's")
	assert.Error(t, verify("team-a/old-owner/succeeded", LegacyNamespaceKey(testMaster, "team-a")))

	require.NoError(t, verify("team-a/before-upgrade/succeeded", cur))
	require.NoError(t, verify("team-a/before-upgrade/succeeded", LegacyNamespaceKey(testMaster, "team-a")))
	require.NoError(t, verify("gone/before-upgrade/succeeded", LegacyNamespaceKey(testMaster, "gone")))
	assert.Equal(t, 1, strings.Count(posts["gone/before-upgrade/succeeded"].sig, "v1="), "the old key's MAC only")
}

// TestCallbackBodyCarriesNoSequence (issue #30 item 4): the POSTed Record
// carried its stream sequence, a position in the invocation stream all
// tenants share; the body is the tenant's view of the Record, without it,
// and (issue #32) without the stream, request hash or namespace UID.
func TestCallbackBodyCarriesNoSequence(t *testing.T) {
	st := startStore(t)
	got := make(chan []byte, 1)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
	}))
	t.Cleanup(rc.Close)
	now := time.Now()
	_, err := st.Create(context.Background(), messages.Record{InvocationID: "i1", Namespace: "team-a", Pool: "echo", Mode: messages.ModeAsync,
		State: messages.StateSucceeded, Stream: "S", Sequence: 42, AcceptedAt: now, UpdatedAt: now, RequestHash: "sha256:h", NamespaceUID: "uid-a",
		Callback: &messages.CallbackStatus{URL: rc.URL, KeyID: "uid-a", State: messages.CallbackPending}})
	require.NoError(t, err)
	runDeliverer(t, Config{Store: st})
	select {
	case b := <-got:
		assert.Contains(t, string(b), `"invocationID":"i1"`)
		assert.NotContains(t, string(b), `"sequence"`)
		// Nor (issue #32) the stream, the request hash or the namespace's UID.
		for _, internal := range []string{`"stream"`, `"requestHash"`, `"namespaceUID"`, "uid-a"} {
			assert.NotContains(t, string(b), internal)
		}
		assert.Contains(t, string(b), `"keyID":"`+KeyID("uid-a")+`"`)
	case <-time.After(time.Minute):
		require.FailNow(t, "callback not delivered")
	}
}
