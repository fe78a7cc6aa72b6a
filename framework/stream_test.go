package framework_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/sidecar/frameworkclient"
)

// TestStreamHandlerRoundTrip: chunks a framework.StreamFunc writes reach
// InvokeStream's callback one by one and in order, multi-line chunks
// intact, and the final framework.Response summarises them; an error from the
// framework.StreamFunc fails the invocation after the chunks it wrote.
func TestStreamHandlerRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		chunks  []string
		err     error
		wantErr string
	}{
		{name: "tokens", chunks: []string{"Hello", ",", " world", "line1\nline2", ""}},
		{name: "error after two", chunks: []string{"a", "b"}, err: errors.New("model crashed"), wantErr: "model crashed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := shortSocket(t)
			serve(t, sock, "", framework.NewStreamHandler(func(ctx context.Context, req framework.Request, w framework.ChunkWriter) error {
				for _, c := range tc.chunks {
					if err := w.WriteChunk([]byte(c)); err != nil {
						return err
					}
				}
				return tc.err
			}))
			var got []string
			resp, err := frameworkclient.NewClient(sock, "", "").InvokeStream(context.Background(), framework.Request{InvocationID: "i1"}, frameworkclient.StreamLimits{}, func(b []byte) error {
				got = append(got, string(b))
				return nil
			})
			require.NoError(t, err)
			assert.Equal(t, tc.chunks, got)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, "true", resp.Headers[framework.StreamedHeader])
			assert.Equal(t, tc.wantErr, resp.Error)
			var sum framework.StreamSummary
			require.NoError(t, json.Unmarshal(resp.Body, &sum))
			assert.Equal(t, len(tc.chunks), sum.Chunks)
			assert.Equal(t, tc.chunks, sum.Data)
		})
	}
}

// TestInvokeStreamFormats: ndjson lines are chunks, a JSON envelope is
// still decoded as before, and chunks over the limits fail the invocation
// with frameworkclient.ErrStreamLimit.
func TestInvokeStreamFormats(t *testing.T) {
	raw := func(ct, body string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == framework.DefaultHealthPath {
				return
			}
			w.Header().Set("Content-Type", ct)
			_, _ = w.Write([]byte(body))
		})
	}
	for _, tc := range []struct {
		name       string
		h          http.Handler
		lim        frameworkclient.StreamLimits
		wantChunks []string
		wantBody   string
		wantErr    error
	}{
		{name: "ndjson", h: raw(framework.ContentTypeNDJSON, "{\"t\":1}\n\n{\"t\":2}\r\n"), wantChunks: []string{`{"t":1}`, `{"t":2}`}},
		{name: "json envelope", h: raw("application/json", `{"statusCode":200,"body":{"x":1}}`), wantBody: `{"x":1}`},
		{name: "chunk too big", h: raw(framework.ContentTypeEventStream, "data: "+strings.Repeat("x", 100)+"\n\n"), lim: frameworkclient.StreamLimits{MaxChunkBytes: 10}, wantErr: frameworkclient.ErrStreamLimit},
		{name: "line too big", h: raw(framework.ContentTypeNDJSON, strings.Repeat("x", 100)+"\n"), lim: frameworkclient.StreamLimits{MaxChunkBytes: 10}, wantErr: frameworkclient.ErrStreamLimit},
		{name: "too many chunks", h: raw(framework.ContentTypeNDJSON, "1\n2\n3\n"), lim: frameworkclient.StreamLimits{MaxChunks: 2}, wantChunks: []string{"1", "2"}, wantErr: frameworkclient.ErrStreamLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := shortSocket(t)
			serve(t, sock, "", tc.h)
			var got []string
			resp, err := frameworkclient.NewClient(sock, "", "").InvokeStream(context.Background(), framework.Request{InvocationID: "i1"}, tc.lim, func(b []byte) error {
				got = append(got, string(b))
				return nil
			})
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.wantChunks, got)
			if tc.wantBody != "" {
				assert.JSONEq(t, tc.wantBody, string(resp.Body))
			}
		})
	}
}

// TestStreamCancelReachesHandler: when the caller's context ends mid-stream
// the framework.StreamFunc's context ends too (the sidecar's cancel stops the
// framework's stream).
func TestStreamCancelReachesHandler(t *testing.T) {
	sock := shortSocket(t)
	stopped := make(chan error, 1)
	serve(t, sock, "", framework.NewStreamHandler(func(ctx context.Context, req framework.Request, w framework.ChunkWriter) error {
		for i := 0; ; i++ {
			if err := w.WriteChunk([]byte(fmt.Sprint(i))); err != nil {
				stopped <- err
				return err
			}
			select {
			case <-ctx.Done():
				stopped <- ctx.Err()
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}))
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err := frameworkclient.NewClient(sock, "", "").InvokeStream(ctx, framework.Request{InvocationID: "i1"}, frameworkclient.StreamLimits{}, func([]byte) error {
		if n++; n == 3 {
			cancel()
		}
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	select {
	case err := <-stopped:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the stream handler did not stop after the caller cancelled")
	}
}
