// Package frameworkclient is the sidecar's side of the framework contract
// (package framework): it calls a framework over its unix socket — health
// and capabilities, invoke, streamed invoke, re-attach and cancel of the
// idempotent invoke. Framework authors need none of it; the sidecar and the
// framework's contract tests use it.
package frameworkclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/httpjson"
	"github.com/runplane/runplane/internal/rawjson"
	"github.com/runplane/runplane/internal/tracing"
)

// Client calls a framework over its unix socket. It is what the sidecar
// uses; tests and benchmarks use it to exercise a framework directly.
type Client struct {
	socketPath string
	invokePath string
	healthPath string
	http       *http.Client
}

// NewClient returns a client for the framework listening on socketPath.
// Empty paths take the contract defaults.
func NewClient(socketPath, invokePath, healthPath string) *Client {
	if invokePath == "" {
		invokePath = framework.DefaultInvokePath
	}
	if healthPath == "" {
		healthPath = framework.DefaultHealthPath
	}
	var d net.Dialer
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socketPath)
		},
		// One connection per in-flight invocation is kept warm.
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	return &Client{socketPath: socketPath, invokePath: invokePath, healthPath: healthPath, http: &http.Client{Transport: tr}}
}

// SocketPath is the socket this client dials.
func (c *Client) SocketPath() string { return c.socketPath }

// Health returns nil when the framework answers 200 on its health path.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.Probe(ctx)
	return err
}

// Capabilities are the contract extensions a framework offers, from its
// health answer's framework.CapabilitiesHeader.
type Capabilities struct {
	// IdempotentInvoke: see idempotent.go.
	IdempotentInvoke bool
}

// Probe is Health, also reporting the framework's capabilities.
func (c *Client) Probe(ctx context.Context) (Capabilities, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://framework"+c.healthPath, nil)
	if err != nil {
		return Capabilities{}, fmt.Errorf("build health request: %w", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return Capabilities{}, fmt.Errorf("framework health on %s: %w", c.socketPath, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return Capabilities{}, fmt.Errorf("framework health on %s%s: HTTP %d: %s", c.socketPath, c.healthPath, resp.StatusCode, bytes.TrimSpace(body))
	}
	var caps Capabilities
	for _, v := range resp.Header.Values(framework.CapabilitiesHeader) {
		for f := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(f) == framework.CapabilityIdempotentInvoke {
				caps.IdempotentInvoke = true
			}
		}
	}
	return caps, nil
}

// ErrUnknownCall: Attach found no such call in the framework.
var ErrUnknownCall = errors.New("the framework does not know this call")

// Attach re-attaches to the call of r (its InvocationID and Attempt) of a
// framework offering the idempotent invoke: it waits for the call's
// outcome and returns it, or ErrUnknownCall when the framework neither runs
// nor remembers it (it is never started by Attach).
func (c *Client) Attach(ctx context.Context, r framework.Request) (framework.Response, error) {
	resp, err := c.do(ctx, r, http.Header{framework.AttachHeader: {framework.AttachOnly}})
	if err != nil {
		return framework.Response{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound && resp.Header.Get(framework.AttachHeader) == framework.AttachUnknown {
		return framework.Response{}, fmt.Errorf("attach to invocation %s attempt %d: %w", r.InvocationID, r.Attempt, ErrUnknownCall)
	}
	return c.decode(resp)
}

// Cancel cancels the call of r in a framework offering the idempotent
// invoke (a hang-up does not cancel there). A call it does not know is
// not an error: there is nothing to stop.
func (c *Client) Cancel(ctx context.Context, r framework.Request) error {
	resp, err := c.do(ctx, framework.Request{InvocationID: r.InvocationID, Attempt: r.Attempt}, http.Header{framework.CancelHeader: {"true"}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
		return fmt.Errorf("cancel invocation %s attempt %d on %s%s: HTTP %d", r.InvocationID, r.Attempt, c.socketPath, c.invokePath, resp.StatusCode)
	}
	return nil
}

// Invoke posts req to the invoke path and decodes the framework.Response envelope.
// An error means the framework did not produce an envelope: it could not be
// reached, it broke the connection (a crash), it answered a non-200 status
// or an undecodable body, or ctx ended first.
func (c *Client) Invoke(ctx context.Context, r framework.Request) (framework.Response, error) {
	resp, err := c.post(ctx, r, "")
	if err != nil {
		return framework.Response{}, err
	}
	defer resp.Body.Close()
	return c.decode(resp)
}

// decode reads a JSON framework.Response envelope answer, whole and into
// a buffer of its declared size, scanned once; a body that is most of it
// is a slice of it (rawjson.Unmarshal: json.Unmarshal scanned a 10 MiB
// body twice and copied it, and io.ReadAll grew its buffer by copies:
// ~80 ms of the call).
func (c *Client) decode(resp *http.Response) (framework.Response, error) {
	data, err := httpjson.ReadBody(resp.Body, resp.ContentLength, httpjson.PeerLengthLimit)
	if err != nil {
		return framework.Response{}, fmt.Errorf("read framework response on %s: %w", c.socketPath, err)
	}
	if resp.StatusCode != http.StatusOK {
		return framework.Response{}, fmt.Errorf("framework invoke on %s%s: HTTP %d: %s", c.socketPath, c.invokePath, resp.StatusCode, truncate(bytes.TrimSpace(data), 512))
	}
	var out framework.Response
	if err := rawjson.Unmarshal(data, &out, "body", &out.Body); err != nil {
		return framework.Response{}, fmt.Errorf("decode framework response envelope: %w", err)
	}
	return out, nil
}

// post sends the invocation envelope r to the invoke path (accept, when
// set, as the Accept header); the caller closes the response body.
func (c *Client) post(ctx context.Context, r framework.Request, accept string) (*http.Response, error) {
	var h http.Header
	if accept != "" {
		h = http.Header{"Accept": {accept}}
	}
	return c.do(ctx, r, h)
}

// do posts r to the invoke path with the extra headers h.
func (c *Client) do(ctx context.Context, r framework.Request, h http.Header) (*http.Response, error) {
	if r.Version == "" {
		r.Version = framework.Version
	}
	// The payload goes in as it is (rawjson): the queue validated it when
	// it took it, and encoding it again would scan and copy it once more.
	payload := r.Payload
	r.Payload = nil
	body, err := json.Marshal(r)
	if err == nil {
		body, err = rawjson.WithField(body, "payload", payload)
	}
	if err != nil {
		return nil, fmt.Errorf("encode invocation envelope: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://framework"+c.invokePath, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build invoke request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	tracing.ToHTTP(ctx, req.Header) // the sidecar's span: the handler's parent
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("framework invoke on %s: %w", c.socketPath, err)
	}
	return resp, nil
}

// CloseIdleConnections drops kept-alive connections (e.g. after the
// framework restarted).
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
