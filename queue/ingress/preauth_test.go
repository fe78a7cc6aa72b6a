package ingress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/internal/callerauth/callerauthtest"
	"github.com/runplane/runplane/internal/httpjson"
	"github.com/runplane/runplane/queue/pool"
)

// aliceInvokesEcho: alice (token tok-a) may invoke team-a/echo, nothing else.
var aliceInvokesEcho = callerauthtest.Static{Users: map[string]string{"tok-a": "alice"}, May: func(u string, req callerauth.Request) bool {
	return u == "alice" && req == callerauth.Request{Verb: VerbInvoke, Namespace: "team-a", Pool: "echo", Subresource: callerauth.SubresourceInvocations}
}}

// offlineServer is an ingress without NATS (no Store): what it answers
// before it needs one is all a test of it may reach; a nil Store makes any
// use of it a panic.
func offlineServer(auth Authorizer, pools pool.Static) *Server {
	cfg := Config{Auth: auth, Pools: pools}.withDefaults()
	return &Server{cfg: cfg, m: newIngressMetrics(nil), sse: newSSEMetrics(nil), bodies: newBodyBudget(cfg.Limits.ReplicaMaxBodyBytes, cfg.Limits.NamespaceMaxBodyBytes, aliasBodyShare*cfg.AliasBodyBytes)}
}

// countingBody is a request body of n bytes, a JSON object that opens
// with head and goes on with one long string, counting what is read of it.
type countingBody struct {
	head []byte
	n    int64
	read atomic.Int64
}

func newCountingBody(head string, n int64) *countingBody {
	return &countingBody{head: []byte(head), n: n}
}

func (c *countingBody) Read(p []byte) (int, error) {
	off := c.read.Load()
	if off >= c.n {
		return 0, io.EOF
	}
	k := int(min(int64(len(p)), c.n-off))
	for i := range k {
		switch pos := off + int64(i); {
		case pos < int64(len(c.head)):
			p[i] = c.head[pos]
		case pos == c.n-2:
			p[i] = '"'
		case pos == c.n-1:
			p[i] = '}'
		default:
			p[i] = 'A'
		}
	}
	c.read.Add(int64(k))
	return k, nil
}

// serve runs h, and reports a panic instead of dying with it.
func serve(h http.Handler, w http.ResponseWriter, r *http.Request) (panicked any) {
	defer func() { panicked = recover() }()
	h.ServeHTTP(w, r)
	return nil
}

const aliasHead = `{"namespace":"team-b","serverlessRequestID":"echo","mode":"async","payload":"`

// TestNothingBeforeAuthentication (issue #30 item 3): one anonymous 85 MB
// body on the seed alias, read and decoded before its caller was checked,
// took the queue from 94 to 392 MiB. Every route now refuses an anonymous
// caller with 401 before it reads a byte of the body (or touches the
// store: this server has none); an authenticated caller of the alias that
// names the pool in the query is authorized before its body is read, and
// one that names it in the body only is read at most AliasBodyBytes.
func TestNothingBeforeAuthentication(t *testing.T) {
	const big = 16 << 20
	s := offlineServer(aliceInvokesEcho, pool.Static{"team-a/echo": pool.DefaultPolicy(), "team-b/echo": pool.DefaultPolicy()})
	h := s.Handler()
	fill := strings.NewReplacer("{namespace}", "team-b", "{pool}", "echo", "{id}", "x")
	type tc struct {
		name, method, path, token, contentType, head string
		size                                         int64
		code                                         int
		maxRead                                      int64
	}
	var cases []tc
	for _, op := range operations() {
		if !op.public {
			cases = append(cases, tc{name: "anonymous " + op.id, method: op.method, path: fill.Replace(op.path), head: aliasHead, size: big,
				code: http.StatusUnauthorized})
		}
	}
	cases = append(cases,
		tc{name: "forged token on the alias", method: http.MethodPost, path: "/api/v1/serverless/invocations", token: "forged", head: aliasHead, size: big,
			code: http.StatusUnauthorized},
		tc{name: "alias, pool in the query, not allowed", method: http.MethodPost, path: "/api/v1/serverless/invocations?namespace=team-b&serverlessRequestID=echo",
			token: "tok-a", head: aliasHead, size: big, code: http.StatusForbidden},
		tc{name: "alias, raw body, pool in the query, not allowed", method: http.MethodPost,
			path: "/api/v1/serverless/invocations?namespace=team-b&serverlessRequestID=echo&mode=async", token: "tok-a", contentType: "application/octet-stream",
			head: "x", size: big, code: http.StatusForbidden},
		tc{name: "alias, pool in the body only, not allowed, big body", method: http.MethodPost, path: "/api/v1/serverless/invocations",
			token: "tok-a", head: aliasHead, size: big, code: http.StatusRequestEntityTooLarge, maxRead: DefaultAliasBodyBytes + 64<<10},
		tc{name: "alias, pool in the body only, not allowed, small body", method: http.MethodPost, path: "/api/v1/serverless/invocations",
			token: "tok-a", head: aliasHead, size: 1 << 10, code: http.StatusForbidden, maxRead: 1 << 10},
		tc{name: "pool route, not allowed", method: http.MethodPost, path: "/v1/namespaces/team-b/pools/echo/invocations",
			token: "tok-a", head: `{"mode":"async","payload":"`, size: big, code: http.StatusForbidden},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := newCountingBody(c.head, c.size)
			r := httptest.NewRequest(c.method, c.path, body)
			r.Header.Set("Content-Type", cmpOr(c.contentType, "application/json"))
			if c.token != "" {
				r.Header.Set("Authorization", "Bearer "+c.token)
			}
			w := httptest.NewRecorder()
			require.Nil(t, serve(h, w, r), "the handler reached the store before it checked its caller")
			assert.Equal(t, c.code, w.Code, w.Body.String())
			assert.Equal(t, httpjson.ProblemContentType, w.Header().Get("Content-Type"))
			assert.LessOrEqual(t, body.read.Load(), c.maxRead, "body bytes read")
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// wantReadTimeout is the longest an anonymous request may hold its
// connection.
const wantReadTimeout = 15 * time.Second

// serveTCP serves s on a real TCP listener and returns its address.
func serveTCP(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs, hln := s.HTTPServer(ln)
	go func() { _ = hs.Serve(hln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return ln.Addr().String()
}

// untilClosed opens a connection to addr, sends head and then, when
// trickle, a byte every 100 ms (a slow sender's pace) until the server
// ends the connection; it returns the status of the server's answer (0:
// none) and fails unless the server closed the connection within limit.
func untilClosed(t *testing.T, addr, head string, trickle bool, limit time.Duration) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	_, err = io.WriteString(c, head)
	require.NoError(t, err)
	stop := make(chan struct{})
	defer close(stop)
	if trickle {
		go func() {
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := c.Write([]byte("A")); err != nil {
						return
					}
				}
			}
		}()
	}
	require.NoError(t, c.SetReadDeadline(start.Add(limit+2*time.Second)))
	br := bufio.NewReader(c)
	status := 0
	if resp, err := http.ReadResponse(br, nil); err == nil {
		status = resp.StatusCode
		// The server may cut the answer short: only its status and the
		// closed connection after it matter here, not the body's read error.
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		_, err = br.ReadByte()
		require.Error(t, err, "the connection is closed after the answer")
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "the connection is still open %s after the request began", time.Since(start))
	} else {
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "no answer and still open %s after the request began", time.Since(start))
	}
	assert.Less(t, time.Since(start), limit+time.Second, "closed within %s", limit)
	return status
}

// TestAnonymousSlowBodyIsCut (issue #30 item 3): an anonymous body sent
// at 1 byte per 100 ms held its connection, and the goroutine reading it,
// for as long as the sender liked (only ReadHeaderTimeout was set). Over
// a real TCP connection, with the default limits, the server answers 401
// and ends the connection within wantReadTimeout, unread.
func TestAnonymousSlowBodyIsCut(t *testing.T) {
	addr := serveTCP(t, offlineServer(aliceInvokesEcho, pool.Static{"team-a/echo": pool.DefaultPolicy()}))
	head := "POST /api/v1/serverless/invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n" + aliasHead
	assert.Equal(t, http.StatusUnauthorized, untilClosed(t, addr, head, true, wantReadTimeout))
}

// TestConnectionTimeouts: over real TCP connections, each limit of
// HTTPLimits ends what it bounds — slow headers, an authenticated
// caller's slow body (408), an idle keep-alive connection — and an
// anonymous body is never waited for.
func TestConnectionTimeouts(t *testing.T) {
	s := offlineServer(aliceInvokesEcho, pool.Static{"team-a/echo": pool.DefaultPolicy()})
	s.cfg.HTTP = HTTPLimits{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, BodyReadTimeout: 500 * time.Millisecond,
		IdleTimeout: 300 * time.Millisecond}.withDefaults()
	addr := serveTCP(t, s)
	body := func(auth string) string {
		return "POST /v1/namespaces/team-a/pools/echo/invocations HTTP/1.1\r\nHost: x\r\n" + auth +
			"Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"mode\":\"async\",\"payload\":\""
	}
	for _, tc := range []struct {
		name    string
		head    string
		trickle bool
		limit   time.Duration
		status  int
	}{
		{"slow headers", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ", true, 300 * time.Millisecond, 0},
		{"anonymous slow body", body(""), true, 300 * time.Millisecond, http.StatusUnauthorized},
		{"authenticated slow body", body("Authorization: Bearer tok-a\r\n"), true, 500 * time.Millisecond, http.StatusRequestTimeout},
		{"idle keep-alive", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", false, 300 * time.Millisecond, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.status, untilClosed(t, addr, tc.head, tc.trickle, tc.limit))
		})
	}
}

// TestUnauthenticatedConnectionsBounded: beyond MaxUnauthenticatedConns
// connections that have not authenticated, a new one is answered 503
// (problem details) and closed; a connection whose request authenticates
// frees its slot, and so does one that closes.
func TestUnauthenticatedConnectionsBounded(t *testing.T) {
	s := offlineServer(aliceInvokesEcho, pool.Static{"team-a/echo": pool.DefaultPolicy()})
	s.cfg.HTTP = HTTPLimits{MaxUnauthenticatedConns: 2}.withDefaults()
	addr := serveTCP(t, s)
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c, bufio.NewReader(c)
	}
	// get returns the answer's status; the body is read to its end so the
	// connection can carry the next request.
	get := func(c net.Conn, br *bufio.Reader, path, auth string) (int, error) {
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n", path, auth); err != nil {
			return 0, fmt.Errorf("writing the request: %w", err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, fmt.Errorf("reading the answer: %w", err)
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return 0, fmt.Errorf("reading the body: %w", err)
		}
		return resp.StatusCode, nil
	}
	// Two connections that say nothing hold both slots (accepted in order).
	c1, br1 := dial()
	c2, _ := dial()
	c3, br3 := dial()
	resp, err := http.ReadResponse(br3, nil)
	require.NoError(t, err, "the third connection is answered at once")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, httpjson.ProblemContentType, resp.Header.Get("Content-Type"))
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	_, err = br3.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "and closed")
	_ = c3.Close()

	// c1's caller authenticates: its slot goes to the next connection.
	status, err := get(c1, br1, "/v1/namespaces/team-a/pools/echo", "Authorization: Bearer tok-a\r\n")
	require.NoError(t, err)
	assert.Equal(t, http.StatusForbidden, status, "alice may not read the pool, but she is known")
	c4, br4 := dial()
	status, err = get(c4, br4, "/healthz", "")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, status)

	// c2 goes away: its slot is freed once the server sees it.
	_ = c2.Close()
	require.Eventually(t, func() bool {
		c, br := dial()
		defer c.Close()
		status, err := get(c, br, "/healthz", "")
		return err == nil && status == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond)
}

// TestLongAnswersOutliveReadDeadlines: once a request is read, its read
// deadline no longer applies (a background read of the connection that
// timed out would end the request's context): a sync wait or a stream of
// an authenticated caller, with or without a body, runs past ReadTimeout
// and BodyReadTimeout.
func TestLongAnswersOutliveReadDeadlines(t *testing.T) {
	s := offlineServer(aliceInvokesEcho, nil)
	s.cfg.HTTP = HTTPLimits{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, BodyReadTimeout: 200 * time.Millisecond}.withDefaults()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs, hln := s.HTTPServer(ln)
	// The answer comes after both deadlines, unless the request's context
	// ends first.
	hs.Handler = s.authenticated(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case <-r.Context().Done():
			http.Error(w, "context ended", http.StatusGone)
		case <-time.After(600 * time.Millisecond):
			w.WriteHeader(http.StatusOK)
		}
	})
	go func() { _ = hs.Serve(hln) }()
	t.Cleanup(func() { _ = hs.Close() })
	for _, body := range []string{"", `{"mode":"sync"}`} {
		req, err := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer tok-a")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "body %q", body)
	}
}
