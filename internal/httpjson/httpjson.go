// Package httpjson writes runplane's JSON HTTP answers: a value with its
// status, errors as {"error": "<message>"} (Error: the extender, sidecar,
// framework helper and file browser), and RFC 9457 problem details
// (WriteProblem: the queue ingress's public API); and reads a JSON body
// whole (ReadBody), for a decode that scans it once.
package httpjson

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
)

// ReadBody reads body, of contentLength bytes when it says so (-1: not
// known), into one buffer of that size when that is at most limit, and
// as io.ReadAll does otherwise: io.ReadAll (and a json.Decoder) grows its
// buffer by copies up to twice the body (a 64 MiB body peaked at 5 times
// its size in the queue's RSS with them, test/bench/bodyrss.sh). limit
// bounds only what a declared length makes it allocate before the bytes
// arrive; a caller that bounds the body wraps it (http.MaxBytesReader).
func ReadBody(body io.Reader, contentLength, limit int64) ([]byte, error) {
	if contentLength < 0 || contentLength > limit {
		return io.ReadAll(body)
	}
	b := make([]byte, contentLength)
	if _, err := io.ReadFull(body, b); err != nil {
		return nil, err
	}
	return b, nil
}

// PeerLengthLimit is ReadBody's limit between the sidecar and the
// framework, one Pod's processes: a payload is at most 64 MiB, ~86 MiB as
// base64 in an envelope. A larger declared length (a framework, the
// tenant's code, may declare anything) is read as it arrives.
const PeerLengthLimit = 128 << 20

// Write answers with code and v encoded as JSON. An encoding error is
// dropped: the status line is already sent, and the only causes are a
// client that went away or a value that cannot be encoded, which the
// callers' tests rule out.
func Write(w http.ResponseWriter, code int, v any) {
	write(w, "application/json", code, v)
}

// WriteEncoded answers with code and a JSON value the caller encoded, the
// concatenation of parts (rawjson.MarshalParts: a large value is written
// as it is, not copied into one buffer first), as Write writes one (a
// newline after it). Its length is declared: a large answer went chunked,
// and a reader could not size its buffer (ReadBody).
func WriteEncoded(w http.ResponseWriter, code int, parts ...[]byte) {
	n := 1
	for _, p := range parts {
		n += len(p)
	}
	w.Header().Set("Content-Length", strconv.Itoa(n))
	header(w, "application/json", code)
	for _, p := range parts {
		if _, err := w.Write(p); err != nil { // a client gone: nothing to add
			return
		}
	}
	_, _ = w.Write([]byte("\n"))
}

func header(w http.ResponseWriter, contentType string, code int) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
}

func write(w http.ResponseWriter, contentType string, code int, v any) {
	header(w, contentType, code)
	_ = json.NewEncoder(w).Encode(v)
}

// Error answers with code and {"error": msg}.
func Error(w http.ResponseWriter, code int, msg string) {
	Write(w, code, struct {
		Error string `json:"error"`
	}{msg})
}

// ProblemContentType is the media type of RFC 9457 problem details.
const ProblemContentType = "application/problem+json"

// Problem is an RFC 9457 problem details object. Answers with more to say
// embed it and add extension members.
type Problem struct {
	// Type is a URI naming the kind of problem; "about:blank": the status says it all.
	Type string `json:"type" doc:"a URI naming the kind of problem; about:blank when the status code says it all"`
	// Title is the status's text (RFC 9457 section 4.2.1 for about:blank).
	Title  string `json:"title" doc:"the HTTP status text"`
	Status int    `json:"status" doc:"the HTTP status code"`
	// Detail explains this occurrence: which field, which limit, what to do.
	Detail string `json:"detail" doc:"what went wrong in this request, naming the field, limit or object"`
	// Instance is the request path the problem occurred on.
	Instance string `json:"instance,omitempty" doc:"the request path"`
	// Error repeats Detail for clients of runplane's former {"error": "..."} body.
	Error string `json:"error" doc:"the same text as detail (kept for clients of the former error body)"`
}

// NewProblem is the problem of status code with detail, of type about:blank.
func NewProblem(r *http.Request, code int, detail string) Problem {
	p := Problem{Type: "about:blank", Title: http.StatusText(code), Status: code, Detail: detail, Error: detail}
	if r != nil {
		p.Instance = r.URL.Path
	}
	return p
}

// WriteProblem answers with code and v (a Problem, or a struct embedding
// one) as application/problem+json.
func WriteProblem(w http.ResponseWriter, code int, v any) {
	write(w, ProblemContentType, code, v)
}
