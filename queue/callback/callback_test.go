package callback

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/stream"
)

// TestPermitted: every non-public range is refused, Deny adds ranges and
// Allow lets a range through.
func TestPermitted(t *testing.T) {
	deny := Targets{Deny: []netip.Prefix{netip.MustParsePrefix("34.118.224.0/20")}}
	allow := Targets{Allow: []netip.Prefix{netip.MustParsePrefix("10.96.0.10/32")}}
	for _, tc := range []struct {
		t    Targets
		ip   string
		want string // "" permitted
	}{
		{Targets{}, "93.184.215.14", ""},
		{Targets{}, "2606:2800:21f:cb07:6820:80da:af6b:8b2c", ""},
		{Targets{}, "127.0.0.1", "loopback"},
		{Targets{}, "::1", "loopback"},
		{Targets{}, "10.1.2.3", "private"},
		{Targets{}, "172.16.0.1", "private"},
		{Targets{}, "192.168.1.1", "private"},
		{Targets{}, "fd00::1", "private"},
		{Targets{}, "169.254.169.254", "link-local"},
		{Targets{}, "fe80::1", "link-local"},
		{Targets{}, "::ffff:10.0.0.1", "private"},
		{Targets{}, "0.0.0.0", "not a unicast"},
		{Targets{}, "100.64.0.1", "reserved"},
		{Targets{}, "64:ff9b::a00:1", "reserved"},
		{Targets{}, "239.1.1.1", "not a unicast"},
		{Targets{}, "::7f00:1", "reserved"},       // IPv4-compatible 127.0.0.1
		{Targets{}, "::ffff:0:a00:1", "reserved"}, // SIIT 10.0.0.1
		{Targets{}, "fec0::1", "reserved"},        // site-local
		{deny, "34.118.230.1", "denied range"},
		{allow, "10.96.0.10", ""},
		{allow, "10.96.0.11", "private"},
	} {
		err := tc.t.Permitted(netip.MustParseAddr(tc.ip))
		if tc.want == "" {
			assert.NoError(t, err, tc.ip)
		} else {
			assert.ErrorContains(t, err, tc.want, tc.ip)
		}
	}
}

// TestValidateURL: what an invocation may name as its callback.
func TestValidateURL(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"https://hooks.example.com/runplane?x=1", ""},
		{"http://93.184.215.14:8080/cb", ""},
		{"ftp://example.com/", "scheme"},
		{"https://user:pw@example.com/", "credentials"},
		{"https://10.0.0.5/", "private"},
		{"https://[::1]/", "loopback"},
		{"https://169.254.169.254/latest/meta-data", "link-local"},
		{"https://localhost/", "not a public host"},
		{"https://kubernetes/", "not a public host"},
		{"https://api.default.svc/", "cluster-internal"},
		{"https://api.default.svc.cluster.local./", "cluster-internal"},
		{"https:///nohost", "no host"},
		{"https://example.com/" + strings.Repeat("a", MaxURLLength), "at most"},
	} {
		err := Targets{}.ValidateURL(tc.url)
		if tc.want == "" {
			assert.NoError(t, err, tc.url)
		} else {
			assert.ErrorContains(t, err, tc.want, tc.url)
		}
	}
}

// TestClientChecksTheDialledAddress: the client refuses a private address
// at connect time, after resolution, whatever name led to it (the check
// that stops DNS rebinding), and follows no redirect.
func TestClientChecksTheDialledAddress(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		http.Redirect(w, r, "http://169.254.169.254/", http.StatusFound)
	}))
	defer srv.Close()
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	for _, host := range []string{"127.0.0.1", "localhost"} { // localhost: a name resolving to loopback
		resp, err := Targets{}.Client(time.Second).Post("http://"+net.JoinHostPort(host, port)+"/", "application/json", nil)
		if err == nil { // a refusal has no response; close one that wrongly got through
			assert.NoError(t, resp.Body.Close())
		}
		var re *RefusedError
		require.ErrorAs(t, err, &re, host)
	}
	assert.Zero(t, hits, "nothing reached the server")

	allowed := Targets{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
	resp, err := allowed.Client(time.Second).Post(srv.URL, "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusFound, resp.StatusCode, "the redirect is not followed")
	assert.Equal(t, 1, hits)
}

// TestSignVerify: a signature verifies with its namespace's key only,
// over the exact body, within the tolerance; a namespace made again under
// the same name (another UID) has another key.
func TestSignVerify(t *testing.T) {
	master := []byte("master-key-0123456789")
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"invocationID":"i1","state":"succeeded"}`)
	a := NamespaceKey(master, "team-a", "uid-1")
	sig := Sign(now, body, a)
	require.NoError(t, Verify(a, sig, body, now.Add(time.Minute), 5*time.Minute))
	assert.ErrorContains(t, Verify(NamespaceKey(master, "team-b", "uid-1"), sig, body, now, 5*time.Minute), "no v1 MAC")
	assert.ErrorContains(t, Verify(NamespaceKey(master, "team-a", "uid-2"), sig, body, now, 5*time.Minute), "no v1 MAC",
		"team-a deleted and made again: the new one's key does not verify the old one's callbacks")
	assert.ErrorContains(t, Verify(LegacyNamespaceKey(master, "team-a"), sig, body, now, 5*time.Minute), "no v1 MAC")
	assert.ErrorContains(t, Verify(a, sig, append(body, ' '), now, 5*time.Minute), "no v1 MAC")
	assert.ErrorContains(t, Verify(a, sig, body, now.Add(time.Hour), 5*time.Minute), "replay")

	both := Sign(now, body, a, LegacyNamespaceKey(master, "team-a"))
	require.NoError(t, Verify(a, both, body, now, 5*time.Minute))
	require.NoError(t, Verify(LegacyNamespaceKey(master, "team-a"), both, body, now, 5*time.Minute), "either key verifies")
}

// TestRefusalNamesNoAddress (issue #30 item 5): a callback to a host name
// that resolves to a denied address recorded, in the Record its tenant
// reads, the address the name resolved to ("dial tcp 127.0.0.1:9:
// callback target 127.0.0.1:9 refused: 127.0.0.1 is a loopback address"):
// a tenant could map cluster-internal names to addresses through it. The
// attempt now names the host the tenant gave and says it resolves to a
// denied address, without the address.
func TestRefusalNamesNoAddress(t *testing.T) {
	st := startStore(t)
	terminal(t, st, "team-a", "i1", "http://localhost:9/hook") // localhost: a name resolving to loopback
	startDeliverer(t, Config{Store: st, Delivery: Delivery{MaxAttempts: 1}})
	var rec messages.Record
	require.Eventually(t, func() bool {
		var err error
		rec, _, err = st.Get(context.Background(), stream.Key("team-a", "i1"))
		return err == nil && rec.Callback.State == messages.CallbackFailed
	}, time.Minute, 20*time.Millisecond, "the callback is given up")
	require.Len(t, rec.Callback.Attempts, 1)
	msg := rec.Callback.Attempts[0].Error
	assert.Contains(t, msg, "localhost")
	assert.Contains(t, msg, "resolves to a denied address")
	for _, addr := range []string{"127.0.0.1", "::1", "loopback"} {
		assert.NotContains(t, msg, addr)
	}
}

// TestAttemptErrorNamesNoAddress: whatever a failed POST's error carries
// (the resolver's address, the dialled one, the queue's own), the
// attempt's text has the host the tenant named and no address.
func TestAttemptErrorNamesNoAddress(t *testing.T) {
	remote := &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 443}
	local := &net.TCPAddr{IP: net.ParseIP("10.244.0.7"), Port: 40000}
	wrap := func(err error) error { return &url.Error{Op: "Post", URL: "https://hooks.example.com/cb", Err: err} }
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"refused", wrap(&net.OpError{Op: "dial", Net: "tcp", Addr: remote, Err: &RefusedError{Addr: "10.1.2.3:443", Reason: errors.New("10.1.2.3 is a private address")}}),
			"callback target hooks.example.com refused: it resolves to a denied address"},
		{"no such host", wrap(&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "hooks.example.com", Server: "10.96.0.10:53", IsNotFound: true}}),
			"callback target hooks.example.com: no such host"},
		{"resolver failure", wrap(&net.DNSError{Err: "server misbehaving", Name: "hooks.example.com", Server: "10.96.0.10:53"}),
			"callback target hooks.example.com: its name could not be resolved"},
		{"connection refused", wrap(&net.OpError{Op: "dial", Net: "tcp", Addr: remote, Source: local, Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}),
			"callback target hooks.example.com: dial: connect: connection refused"},
		{"reset", wrap(&net.OpError{Op: "read", Net: "tcp", Addr: remote, Source: local, Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}),
			"callback target hooks.example.com: read: read: connection reset by peer"},
		{"timeout", wrap(context.DeadlineExceeded), "callback target hooks.example.com: timed out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := attemptError("https://hooks.example.com/cb", tc.err)
			assert.Equal(t, tc.want, strings.TrimSuffix(got, refusedHint))
			for _, addr := range []string{"10.1.2.3", "10.244.0.7", "10.96.0.10"} {
				assert.NotContains(t, got, addr)
			}
		})
	}
}
