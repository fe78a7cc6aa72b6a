package framework

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"k8s.io/utils/clock"

	"github.com/runplane/runplane/internal/httpjson"
	"github.com/runplane/runplane/internal/rawjson"
	"github.com/runplane/runplane/internal/tracing"
)

// Default paths of the contract; a Pod may override them with the
// runplane.io/framework-* annotations (the webhook passes them as env).
const (
	DefaultInvokePath = "/invoke"
	DefaultHealthPath = "/healthz"
)

// HandlerFunc runs one invocation. A returned error becomes a Response with
// statusCode 500 and the error text, which the sidecar reports as failed.
type HandlerFunc func(ctx context.Context, req Request) (Response, error)

// Option configures NewHandler.
type Option func(*handlerOptions)

type handlerOptions struct {
	invokePath string
	healthPath string
	health     func(context.Context) error
	// The idempotent invoke (idempotent.go); plain turns it off.
	plain       bool
	clock       clock.WithDelayedExecution
	detachGrace time.Duration
	recent      int
	recentFor   time.Duration
	// tracer records the handler spans (trace.go).
	tracer tracing.Tracer
}

func newHandlerOptions(opts []Option) handlerOptions {
	o := handlerOptions{invokePath: DefaultInvokePath, healthPath: DefaultHealthPath, clock: clock.RealClock{},
		detachGrace: DefaultDetachGrace, recent: DefaultRecentOutcomes, recentFor: DefaultRecentFor}
	for _, opt := range opts {
		opt(&o)
	}
	o.tracer = handlerTracer(o.tracer)
	return o
}

// WithDetachGrace sets how long a call keeps running once no sidecar
// waits for it (the sidecar died): a restarted sidecar re-attaches within
// it; after it the call's context is cancelled (default DefaultDetachGrace).
func WithDetachGrace(d time.Duration) Option {
	return func(o *handlerOptions) {
		if d > 0 {
			o.detachGrace = d
		}
	}
}

// WithRecentOutcomes sets how many finished calls' outcomes are kept, and
// for how long, for a restarted sidecar to collect (defaults
// DefaultRecentOutcomes, DefaultRecentFor).
func WithRecentOutcomes(n int, keepFor time.Duration) Option {
	return func(o *handlerOptions) {
		if n > 0 {
			o.recent = n
		}
		if keepFor > 0 {
			o.recentFor = keepFor
		}
	}
}

// WithClock sets the clock of the detach grace and the outcomes' memory
// (tests).
func WithClock(c clock.WithDelayedExecution) Option {
	return func(o *handlerOptions) { o.clock = c }
}

// withPlainContract serves the plain contract: no idempotent invoke
// (NewStreamHandler: a stream cannot be replayed to a re-attaching sidecar).
func withPlainContract() Option {
	return func(o *handlerOptions) { o.plain = true }
}

// WithPaths overrides the invoke and health paths (empty keeps the default).
func WithPaths(invokePath, healthPath string) Option {
	return func(o *handlerOptions) {
		if invokePath != "" {
			o.invokePath = invokePath
		}
		if healthPath != "" {
			o.healthPath = healthPath
		}
	}
}

// WithHealth makes the health path report the framework unready while check
// returns an error (e.g. a model still loading).
func WithHealth(check func(context.Context) error) Option {
	return func(o *handlerOptions) { o.health = check }
}

// errorBody is the JSON body of a transport-level error (bad envelope,
// wrong method), as opposed to an invocation error inside a Response.
type errorBody struct {
	Error string `json:"error"`
}

// NewHandler serves the framework contract: GET health path answers 200
// while healthy, POST invoke path decodes a Request, runs fn and answers the
// Response envelope. The request context ends when the sidecar gives up
// (cancel, timeout), so fn should honour ctx. It offers the idempotent
// invoke (idempotent.go): a call is run once per invocation ID and attempt,
// and a repeated invoke of it waits for and answers its outcome.
func NewHandler(fn HandlerFunc, opts ...Option) http.Handler {
	o := newHandlerOptions(opts)
	cs := newCalls(o)
	mux := http.NewServeMux()
	mux.HandleFunc(o.healthPath, func(w http.ResponseWriter, r *http.Request) {
		if !o.plain {
			w.Header().Set(CapabilitiesHeader, CapabilityIdempotentInvoke)
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			httpjson.Write(w, http.StatusMethodNotAllowed, errorBody{Error: fmt.Sprintf("method %s not allowed on %s: use GET", r.Method, o.healthPath)})
			return
		}
		if o.health != nil {
			if err := o.health(r.Context()); err != nil {
				httpjson.Write(w, http.StatusServiceUnavailable, errorBody{Error: err.Error()})
				return
			}
		}
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc(o.invokePath, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			httpjson.Write(w, http.StatusMethodNotAllowed, errorBody{Error: fmt.Sprintf("method %s not allowed on %s: use POST", r.Method, o.invokePath)})
			return
		}
		req, ok := readRequest(w, r)
		if !ok {
			return
		}
		parent := tracing.FromHTTP(r.Header)
		run := func(ctx context.Context) Response {
			ctx, span := o.tracer.Start(ctx, parent, "framework handler", handlerSpanOptions(req)...)
			resp, err := fn(ctx, req)
			endHandlerSpan(span, resp, err)
			if err != nil {
				resp = Response{StatusCode: http.StatusInternalServerError, Error: err.Error()}
			}
			if resp.StatusCode == 0 {
				resp.StatusCode = http.StatusOK
			}
			return resp
		}
		if o.plain || req.Attempt == 0 {
			// No attempt (an older sidecar, a direct caller): the plain
			// contract, the call ends with its connection.
			writeResponse(w, run(r.Context()))
			return
		}
		serveIdempotent(w, r, cs, callKey{req.InvocationID, req.Attempt}, run)
	})
	return mux
}

// readRequest reads the invocation envelope of r, answering 400 when it
// is not one. The body is read whole, which also lets net/http notice a
// caller that hangs up (the sidecar cancelling an invocation) and cancel
// r.Context() for the handler: it watches the connection only once the
// body is consumed. It is scanned once and a payload that is most of it
// is a slice of it (rawjson.Unmarshal: a json.Decoder scanned a 10 MiB
// payload three times and copied it four, ~90 ms of the call).
func readRequest(w http.ResponseWriter, r *http.Request) (Request, bool) {
	var req Request
	b, err := httpjson.ReadBody(r.Body, r.ContentLength, httpjson.PeerLengthLimit)
	if err != nil {
		httpjson.Write(w, http.StatusBadRequest, errorBody{Error: fmt.Sprintf("read invocation envelope: %v", err)})
		return req, false
	}
	if err := rawjson.Unmarshal(b, &req, "payload", &req.Payload); err != nil {
		httpjson.Write(w, http.StatusBadRequest, errorBody{Error: fmt.Sprintf("decode invocation envelope: %v", err)})
		return req, false
	}
	if req.InvocationID == "" {
		httpjson.Write(w, http.StatusBadRequest, errorBody{Error: "invocation envelope: field invocationID must not be empty"})
		return req, false
	}
	return req, true
}

// writeResponse answers a call with resp. Its body is checked once
// (rawjson.Valid) and written as it is (rawjson.MarshalParts): encoding/json's pass
// would also compact and escape it, a copy nobody needs (the sidecar reads
// the body as it is). A body that is not JSON answers what a handler's
// error does — status 500 naming it — not a 200 with an empty envelope.
func writeResponse(w http.ResponseWriter, resp Response) {
	if len(resp.Body) > 0 && !rawjson.Valid(resp.Body) {
		resp = Response{StatusCode: http.StatusInternalServerError, Error: "the handler's response body is not valid JSON"}
	}
	parts, err := rawjson.MarshalParts(&resp, &resp.Body)
	if err != nil {
		resp = Response{StatusCode: http.StatusInternalServerError, Error: fmt.Sprintf("encode the handler's response: %v", err)}
		httpjson.Write(w, http.StatusOK, resp)
		return
	}
	httpjson.WriteEncoded(w, http.StatusOK, parts...)
}

// serveIdempotent answers one POST of call k: a cancel, a re-attach, or a
// call (started when new, joined when known).
func serveIdempotent(w http.ResponseWriter, r *http.Request, cs *calls, k callKey, run func(context.Context) Response) {
	if r.Header.Get(CancelHeader) == "true" {
		if !cs.cancel(k) {
			httpjson.Write(w, http.StatusNotFound, errorBody{Error: fmt.Sprintf("no call of invocation %s attempt %d is known here", k.id, k.attempt)})
			return
		}
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "cancelled"})
		return
	}
	c := cs.start(r.Context(), k, r.Header.Get(AttachHeader) != AttachOnly, run)
	if c == nil {
		// A re-attach to a call this framework does not know (it restarted,
		// or forgot the outcome): never started here, the sidecar has no
		// payload to give it.
		w.Header().Set(AttachHeader, AttachUnknown)
		httpjson.Write(w, http.StatusNotFound, errorBody{Error: fmt.Sprintf("no call of invocation %s attempt %d is known here", k.id, k.attempt)})
		return
	}
	defer cs.release(c)
	select {
	case <-c.done:
		writeResponse(w, c.resp)
	case <-r.Context().Done():
		// The sidecar hung up: detached; the call goes on (release).
	}
}

// ServeUnix serves h on the unix socket at socketPath until ctx ends, then
// shuts down gracefully, letting running invocations finish (up to 30s).
// It creates the socket's directory and replaces a stale socket file.
func ServeUnix(ctx context.Context, socketPath string, h http.Handler) error {
	ln, err := ListenUnix(socketPath)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve framework on %s: %w", socketPath, err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("shut down framework on %s: %w", socketPath, err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve framework on %s: %w", socketPath, err)
	}
	return nil
}

// ListenUnix listens on socketPath, creating its directory and removing a
// stale socket left by a previous run. The socket is world-writable because
// the sidecar and the framework container may run as different users; the
// directory (an emptyDir of the Pod) is what scopes access.
func ListenUnix(socketPath string) (net.Listener, error) {
	if socketPath == "" {
		return nil, errors.New("framework socket path must not be empty")
	}
	if err := os.MkdirAll(filepath.Dir(socketPath), 0o755); err != nil {
		return nil, fmt.Errorf("create socket directory for %s: %w", socketPath, err)
	}
	if fi, err := os.Lstat(socketPath); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("framework socket path %s exists and is not a socket", socketPath)
		}
		if err := os.Remove(socketPath); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", socketPath, err)
		}
	}
	ln, err := net.Listen("unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("listen on framework socket %s: %w", socketPath, err)
	}
	if err := os.Chmod(socketPath, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod framework socket %s: %w", socketPath, err)
	}
	return ln, nil
}
