package ingress

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/runplane/runplane/internal/httpjson"
	"github.com/runplane/runplane/internal/refusal"
)

// DefaultAliasBodyBytes is Config.AliasBodyBytes's default: what the seed
// alias reads of a body before it knows whether its caller may invoke the
// pool the body names.
const DefaultAliasBodyBytes = 256 << 10

// aliasBodyShare is how many AliasBodyBytes the seed-alias requests that
// name their pool only inside the body may hold together (bodyBudget's
// aliasMax): 4 MiB by default, so one tenant's namespace share and
// theirs (96 + 4 MiB) leave the replica's 192 MiB room for another
// tenant's largest body (~86 MiB).
const aliasBodyShare = 16

// HTTPLimits bound what one connection may hold of the ingress. Being an
// anonymous caller costs nothing, so whatever one may hold, many hold:
// until a request authenticates (the first thing every route does), its
// connection counts against MaxUnauthenticatedConns and ReadTimeout, and
// nothing of its body is read.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds reading a request's headers (default 10s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a request whose caller is not
	// authenticated (default 15s, at least ReadHeaderTimeout): its headers,
	// and what the server discards of an unread body after answering.
	ReadTimeout time.Duration
	// BodyReadTimeout bounds reading an authenticated caller's body
	// (default 5m: a body at MaxBodyBytes' default at about 300 KB/s;
	// 408 beyond).
	BodyReadTimeout time.Duration
	// IdleTimeout closes a keep-alive connection this long without a
	// request (default 60s).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers (default 64 KiB: a bearer
	// token is a few KiB; net/http's default is 1 MiB).
	MaxHeaderBytes int
	// MaxUnauthenticatedConns bounds the connections none of whose
	// requests has authenticated yet (default 512): beyond, a new
	// connection is answered 503 and closed at once. A connection leaves
	// the count when a request on it authenticates, or when it closes.
	MaxUnauthenticatedConns int
}

func (l HTTPLimits) withDefaults() HTTPLimits {
	l.ReadHeaderTimeout = cmp.Or(l.ReadHeaderTimeout, 10*time.Second)
	l.ReadTimeout = max(cmp.Or(l.ReadTimeout, 15*time.Second), l.ReadHeaderTimeout)
	l.BodyReadTimeout = cmp.Or(l.BodyReadTimeout, 5*time.Minute)
	l.IdleTimeout = cmp.Or(l.IdleTimeout, 60*time.Second)
	l.MaxHeaderBytes = cmp.Or(l.MaxHeaderBytes, 64<<10)
	l.MaxUnauthenticatedConns = cmp.Or(l.MaxUnauthenticatedConns, 512)
	return l
}

// HTTPServer is the http.Server the ingress is served by, and ln wrapped
// to count the connections not yet authenticated: serve the one on the
// other. No WriteTimeout: a sync caller waits up to an hour, a stream as
// long as its invocation runs.
func (s *Server) HTTPServer(ln net.Listener) (*http.Server, net.Listener) {
	l := s.cfg.HTTP
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: l.ReadHeaderTimeout, ReadTimeout: l.ReadTimeout,
		IdleTimeout: l.IdleTimeout, MaxHeaderBytes: l.MaxHeaderBytes,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if pc, ok := c.(*preAuthConn); ok {
				return context.WithValue(ctx, preAuthKey{}, pc)
			}
			return ctx
		}}
	return hs, &preAuthListener{Listener: ln, slots: make(chan struct{}, l.MaxUnauthenticatedConns), refused: s.m.connsRefused,
		answer: tooManyConnsAnswer()}
}

// authenticated serves h to the callers the Authorizer knows and answers
// any other (401, 429 or 503) before a byte of its body is read. A known
// caller's connection leaves the unauthenticated count, and its body gets
// BodyReadTimeout.
func (s *Server) authenticated(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Auth != nil {
			// A clone: the bearer-token reader removes the header it accepts.
			if _, err := s.cfg.Auth.Authenticate(r.Clone(r.Context())); err != nil {
				// The connection ends with the answer: the rest of the body
				// is never read, and it holds no unauthenticated slot.
				w.Header().Set("Connection", "close")
				if !s.answerRefusal(w, err) {
					s.cfg.Logger.Warn("caller authentication: apiserver unavailable", "err", err)
					s.m.rejected.WithLabelValues("503").Inc()
					problem(w, nil, http.StatusServiceUnavailable, fmt.Sprintf("cannot ask the apiserver who the caller is: %v", err))
				}
				return
			}
		}
		if pc, ok := r.Context().Value(preAuthKey{}).(*preAuthConn); ok {
			pc.release()
		}
		if r.ContentLength != 0 {
			// net/http lifts it once the body is read (its background read
			// of the connection then waits for the caller to go away), so a
			// sync wait or a stream outlives it.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.HTTP.BodyReadTimeout))
		}
		h(w, r)
	}
}

// bodyTimedOut answers 408 when err is the body's read deadline passing.
func (s *Server) bodyTimedOut(w http.ResponseWriter, err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	w.Header().Set("Connection", "close")
	s.reject(w, http.StatusRequestTimeout, fmt.Sprintf("the request body did not arrive within %s", s.cfg.HTTP.BodyReadTimeout))
	return true
}

// answerRefusal answers err when it is a refusal for the caller.
func (s *Server) answerRefusal(w http.ResponseWriter, err error) bool {
	ref, ok := errors.AsType[*refusal.Error](err)
	if !ok {
		return false
	}
	s.m.rejected.WithLabelValues(fmt.Sprint(ref.Status)).Inc()
	if ref.RetryAfter > 0 {
		w.Header().Set("Retry-After", retryAfter(ref.RetryAfter))
	}
	if ref.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	problem(w, nil, ref.Status, ref.Error())
	return true
}

type preAuthKey struct{}

// preAuthListener hands out connections while fewer than cap(slots) are
// unauthenticated, and turns the others away at once: a slot freed by an
// authentication or a close is taken by the next connection, and a caller
// turned away may retry.
type preAuthListener struct {
	net.Listener
	slots   chan struct{}
	refused prometheus.Counter
	answer  []byte
}

func (l *preAuthListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &preAuthConn{Conn: c, slots: l.slots}, nil
		default:
			l.refused.Inc()
			go turnAway(c, l.answer)
		}
	}
}

// turnAway answers c's caller 503 and closes it, unread; the write goes
// to a fresh socket's buffer, the deadline is for a peer that never reads.
func turnAway(c net.Conn, answer []byte) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(answer)
	_ = c.Close()
}

func tooManyConnsAnswer() []byte {
	body, _ := json.Marshal(httpjson.NewProblem(nil, http.StatusServiceUnavailable,
		"too many connections whose callers are not authenticated yet; retry later"))
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: %s\r\nX-Content-Type-Options: nosniff\r\nRetry-After: 1\r\n"+
		"Connection: close\r\nContent-Length: %d\r\n\r\n%s", httpjson.ProblemContentType, len(body), body)
}

// preAuthConn holds a slot of its listener until a request on it
// authenticates or it closes.
type preAuthConn struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
}

func (c *preAuthConn) release() { c.once.Do(func() { <-c.slots }) }

func (c *preAuthConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// CloseWrite lets net/http half-close the connection after an error
// answer (so the caller reads it before the reset), as it does a
// *net.TCPConn's.
func (c *preAuthConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
