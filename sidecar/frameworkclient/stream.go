package frameworkclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"unicode/utf8"

	"github.com/runplane/runplane/framework"
)

// StreamLimits bound a streamed answer (InvokeStream).
type StreamLimits struct {
	// MaxChunkBytes bounds one chunk (default 64 KiB): a longer event or
	// line fails the invocation.
	MaxChunkBytes int
	// MaxChunks bounds the chunks of one invocation (default 100000).
	MaxChunks int
	// MaxSummaryBytes bounds the chunks kept in the final framework.Response's
	// body (framework.StreamSummary.Data; default 1 MiB): beyond it only the counts
	// are kept.
	MaxSummaryBytes int
}

func (l StreamLimits) withDefaults() StreamLimits {
	if l.MaxChunkBytes <= 0 {
		l.MaxChunkBytes = 64 << 10
	}
	if l.MaxChunks <= 0 {
		l.MaxChunks = 100000
	}
	if l.MaxSummaryBytes <= 0 {
		l.MaxSummaryBytes = 1 << 20
	}
	return l
}

// ErrStreamLimit is wrapped by the error of an answer over StreamLimits.
var ErrStreamLimit = errors.New("stream limit exceeded")

// InvokeStream posts req like Invoke. A JSON answer is decoded as Invoke
// does and onChunk is never called; a streamed answer (text/event-stream,
// application/x-ndjson) calls onChunk with each chunk as it arrives (the
// slice is onChunk's to keep) and ends in a framework.Response with status 200,
// framework.StreamedHeader "true" and a framework.StreamSummary body, whose Error is the
// framework's error event. An error from onChunk stops reading and is
// returned, as is ctx ending or the connection breaking mid-stream.
func (c *Client) InvokeStream(ctx context.Context, r framework.Request, lim StreamLimits, onChunk func([]byte) error) (framework.Response, error) {
	lim = lim.withDefaults()
	resp, err := c.post(ctx, r, "application/json, "+framework.ContentTypeEventStream+", "+framework.ContentTypeNDJSON)
	if err != nil {
		return framework.Response{}, err
	}
	defer resp.Body.Close()
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != http.StatusOK || (mt != framework.ContentTypeEventStream && mt != framework.ContentTypeNDJSON) {
		return c.decode(resp)
	}
	sum := framework.StreamSummary{Data: []string{}}
	kept := 0
	emit := func(chunk []byte) error {
		if sum.Chunks >= lim.MaxChunks {
			return fmt.Errorf("the framework streamed more than %d chunks: %w", lim.MaxChunks, ErrStreamLimit)
		}
		sum.Chunks++
		sum.Bytes += int64(len(chunk))
		if !sum.Truncated {
			if kept+len(chunk) > lim.MaxSummaryBytes {
				sum.Truncated, sum.Data = true, nil
			} else {
				kept += len(chunk)
				sum.Data = append(sum.Data, string(chunk))
			}
		}
		return onChunk(chunk)
	}
	var ferr string
	if mt == framework.ContentTypeNDJSON {
		err = readNDJSON(resp.Body, lim.MaxChunkBytes, emit)
	} else {
		err = readSSE(resp.Body, lim.MaxChunkBytes, func(event string, data []byte) error {
			if event == framework.StreamErrorEvent {
				ferr = string(data)
				if !utf8.Valid(data) || ferr == "" {
					ferr = "the framework's stream ended with an error event"
				}
				return errStop
			}
			return emit(data)
		})
	}
	if err != nil && !errors.Is(err, errStop) {
		if ctx.Err() == nil {
			err = fmt.Errorf("framework stream on %s: %w", c.socketPath, err)
		}
		return framework.Response{}, err
	}
	sb, err := json.Marshal(sum)
	if err != nil {
		return framework.Response{}, fmt.Errorf("encode stream summary: %w", err)
	}
	return framework.Response{StatusCode: http.StatusOK, ContentType: "application/json", Headers: map[string]string{framework.StreamedHeader: "true"},
		Body: sb, Error: ferr}, nil
}

var errStop = errors.New("stop")

// readNDJSON calls fn with every non-empty line of r.
func readNDJSON(r io.Reader, maxLine int, fn func([]byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(maxLine+1, 64<<10)), maxLine+1)
	for sc.Scan() {
		line := bytes.TrimSuffix(sc.Bytes(), []byte("\r"))
		if len(line) == 0 {
			continue
		}
		if len(line) > maxLine {
			return fmt.Errorf("a line of more than %d bytes: %w", maxLine, ErrStreamLimit)
		}
		if err := fn(bytes.Clone(line)); err != nil {
			return err
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		return fmt.Errorf("a line of more than %d bytes: %w", maxLine, ErrStreamLimit)
	}
	return sc.Err()
}

// readSSE calls fn with every event of r (its name, "" for the default,
// and its data lines joined by "\n"), following the WHATWG event-stream
// parsing rules for the fields used here (event, data; comments and other
// fields are skipped). Hand-written: the parse is a few lines, and no
// server-sent-events library is among the project's dependencies.
func readSSE(r io.Reader, maxEvent int, fn func(event string, data []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(maxEvent+16, 64<<10)), maxEvent+16)
	var event string
	var data []byte
	has := false
	for sc.Scan() {
		line := bytes.TrimSuffix(sc.Bytes(), []byte("\r"))
		if len(line) == 0 {
			if has {
				if err := fn(event, data); err != nil {
					return err
				}
			}
			event, data, has = "", nil, false
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			event = string(value)
		case "data":
			if has {
				data = append(data, '\n')
			}
			data, has = append(data, value...), true
			if len(data) > maxEvent {
				return fmt.Errorf("an event of more than %d bytes: %w", maxEvent, ErrStreamLimit)
			}
		}
	}
	if errors.Is(sc.Err(), bufio.ErrTooLong) {
		return fmt.Errorf("an event line of more than %d bytes: %w", maxEvent, ErrStreamLimit)
	}
	return sc.Err()
}
