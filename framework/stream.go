package framework

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Streamed answers. Besides the JSON Response envelope, a framework may
// answer POST /invoke with HTTP 200 and a streamed body, written as it is
// produced (chunked HTTP over the unix socket):
//
//   - Content-Type text/event-stream: every event is one chunk (its data
//     lines joined by "\n"); an event named "error" ends the invocation
//     failed with its data as the error.
//   - Content-Type application/x-ndjson: every non-empty line is one chunk.
//
// The sidecar relays each chunk to the caller as it arrives; the end of
// the body is the end of the invocation (succeeded, unless an error event
// came or the connection broke).
const (
	ContentTypeEventStream = "text/event-stream"
	ContentTypeNDJSON      = "application/x-ndjson"
	// StreamErrorEvent is the SSE event name that fails a streamed invocation.
	StreamErrorEvent = "error"
)

// ChunkWriter is what a StreamFunc writes its chunks to. Each WriteChunk
// is one chunk, sent to the sidecar at once.
type ChunkWriter interface {
	WriteChunk(p []byte) error
}

// StreamFunc runs one invocation and writes its output as chunks. A
// returned error ends the stream with an error event: the invocation
// fails with its text (the chunks already written stay delivered).
type StreamFunc func(ctx context.Context, req Request, w ChunkWriter) error

// NewStreamHandler serves the framework contract with a streaming invoke
// handler: fn's chunks go out as server-sent events. The health path and
// options are NewHandler's.
func NewStreamHandler(fn StreamFunc, opts ...Option) http.Handler {
	opts = append(opts, withPlainContract())
	o := newHandlerOptions(opts)
	// Everything but the invoke path (health, 404s, wrong methods) is
	// NewHandler's; its invoke function is never reached.
	base := NewHandler(func(context.Context, Request) (Response, error) {
		return Response{}, errors.New("unreachable")
	}, opts...)
	mux := http.NewServeMux()
	mux.Handle("/", base)
	mux.HandleFunc(o.invokePath, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			base.ServeHTTP(w, r)
			return
		}
		req, ok := readRequest(w, r)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", ContentTypeEventStream)
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		sw := &sseWriter{w: w, rc: http.NewResponseController(w)}
		if err := sw.rc.Flush(); err != nil {
			return // the sidecar is gone
		}
		if err := fn(r.Context(), req, sw); err != nil && sw.err == nil {
			_ = sw.event(StreamErrorEvent, []byte(err.Error()))
		}
	})
	return mux
}

// sseWriter writes chunks as server-sent events and flushes each.
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error // the first write error: the sidecar hung up
}

func (s *sseWriter) WriteChunk(p []byte) error { return s.event("", p) }

func (s *sseWriter) event(name string, p []byte) error {
	if s.err != nil {
		return s.err
	}
	var b strings.Builder
	if name != "" {
		b.WriteString("event: " + name + "\n")
	}
	writeSSEData(&b, p)
	b.WriteString("\n")
	if _, err := s.w.Write([]byte(b.String())); err != nil {
		s.err = fmt.Errorf("write chunk: %w", err)
		return s.err
	}
	if err := s.rc.Flush(); err != nil {
		s.err = fmt.Errorf("flush chunk: %w", err)
	}
	return s.err
}

// writeSSEData writes p as data lines: one per line of p ("\r\n", "\r"
// and "\n" end a line in SSE, so each becomes a new data field, which the
// reader joins with "\n").
func writeSSEData(b *strings.Builder, p []byte) {
	s := strings.ReplaceAll(strings.ReplaceAll(string(p), "\r\n", "\n"), "\r", "\n")
	for line := range strings.SplitSeq(s, "\n") {
		b.WriteString("data: ")
		b.WriteString(line)
		b.WriteString("\n")
	}
}

// StreamSummary is the body of the Response a streamed answer ends in:
// what was streamed, and the chunks themselves (as UTF-8 strings) while
// they fit in StreamLimits.MaxSummaryBytes.
type StreamSummary struct {
	Chunks int   `json:"chunks"`
	Bytes  int64 `json:"bytes"`
	// Data are the chunks in order; absent (Truncated) when they did not fit.
	Data      []string `json:"data,omitempty"`
	Truncated bool     `json:"truncated,omitempty"`
}

// StreamedHeader marks the Response of a streamed answer.
const StreamedHeader = "Runplane-Streamed"
