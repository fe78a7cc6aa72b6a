package ingress

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"

	v1 "github.com/runplane/runplane/api/serverless/v1"
	"github.com/runplane/runplane/internal/httpjson"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/objects"
	"github.com/runplane/runplane/internal/rawjson"
	"github.com/runplane/runplane/queue/callback"
)

// tooLarge answers 413 naming the limit.
func (s *Server) tooLarge(w http.ResponseWriter, what string, size int64) {
	msg := fmt.Sprintf("%s exceeds the limit of %d bytes (%s)", what, s.cfg.MaxPayloadBytes, mib(s.cfg.MaxPayloadBytes))
	if size > 0 {
		msg = fmt.Sprintf("%s of %d bytes exceeds the limit of %d bytes (%s)", what, size, s.cfg.MaxPayloadBytes, mib(s.cfg.MaxPayloadBytes))
	}
	s.reject(w, http.StatusRequestEntityTooLarge, msg)
}

func mib(n int64) string { return strconv.FormatFloat(float64(n)/(1<<20), 'f', -1, 64) + " MiB" }

// rawBody reports whether r carries the payload itself as its body (any
// Content-Type but JSON): the invocation's fields then come from the query
// (mode, invocationID, timeoutSeconds, ttlSeconds; namespace and
// serverlessRequestID on the seed alias) and contentType is the body's.
//
// application/x-www-form-urlencoded is read as the JSON envelope, as
// always: it is what curl -d sends when no Content-Type is given.
func rawBody(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if ct == "" || messages.IsJSON(ct) {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err != nil || mt != "application/x-www-form-urlencoded"
}

// decodeRaw reads a raw-body request: the body, at most MaxPayloadBytes,
// becomes the payload (base64 in the envelope).
func (s *Server) decodeRaw(w http.ResponseWriter, r *http.Request) (v1.InvokeRequest, bool) {
	q := r.URL.Query()
	req := v1.InvokeRequest{Mode: v1.Mode(q.Get("mode")), Namespace: q.Get("namespace"), InvocationID: q.Get("invocationID"),
		ServerlessRequestID: q.Get("serverlessRequestID"), ContentType: r.Header.Get("Content-Type")}
	for _, f := range []struct {
		name string
		v    *int
	}{{"timeoutSeconds", &req.TimeoutSeconds}, {"ttlSeconds", &req.TTLSeconds}} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				s.reject(w, http.StatusBadRequest, fmt.Sprintf("query parameter %s %q: not an integer", f.name, v))
				return req, false
			}
			*f.v = n
		}
	}
	for k := range q {
		switch k {
		case "mode", "namespace", "invocationID", "serverlessRequestID", "timeoutSeconds", "ttlSeconds":
		default:
			s.reject(w, http.StatusBadRequest, fmt.Sprintf("unknown query parameter %q: a raw body takes mode, invocationID, timeoutSeconds, ttlSeconds "+
				"(and namespace, serverlessRequestID on the seed alias); send a JSON body for headers and attributes", k))
			return req, false
		}
	}
	b, err := httpjson.ReadBody(http.MaxBytesReader(w, r.Body, s.cfg.MaxPayloadBytes), r.ContentLength, s.cfg.MaxPayloadBytes)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		s.tooLarge(w, "request body", 0)
		return req, false
	}
	var le *limitError
	if errors.As(err, &le) { // a body without a length past its budget
		s.tooMany(w, le)
		return req, false
	}
	if err != nil {
		if !s.bodyTimedOut(w, err) {
			s.reject(w, http.StatusBadRequest, fmt.Sprintf("read body: %v", err))
		}
		return req, false
	}
	if len(b) > 0 {
		req.Payload = quotedBase64(b)
	}
	return req, true
}

// quotedBase64 is b as a JSON string of its standard base64, made in one
// buffer: base64's alphabet needs no escaping, and the string and
// json.Marshal's copies of it would each cost 4/3 of the body again.
func quotedBase64(b []byte) json.RawMessage {
	p := make([]byte, base64.StdEncoding.EncodedLen(len(b))+2)
	p[0], p[len(p)-1] = '"', '"'
	base64.StdEncoding.Encode(p[1:len(p)-1], b)
	return p
}

// validPayload checks a payload against its contentType: anything but
// JSON must be a JSON string of standard base64. JSON needs no check here:
// p was cut from the request body (decodeBody validated it, the one scan
// it needs) or encoded from a raw body — scanning it again cost a 10
// MiB call ~40 ms.
func validPayload(contentType string, p json.RawMessage) error {
	if len(p) == 0 || messages.IsJSON(contentType) {
		return nil
	}
	if inner, ok := plainString(p); ok {
		// Checked as it streams: decoding it whole cost the string and its
		// bytes, 2.3 times a payload at the limit, for a verdict.
		if _, err := io.Copy(io.Discard, base64.NewDecoder(base64.StdEncoding, bytes.NewReader(inner))); err != nil {
			return fmt.Errorf("field payload: contentType %q is not JSON, so the payload must be standard base64: %w", contentType, err)
		}
		return nil
	}
	var s string
	if err := json.Unmarshal(p, &s); err != nil {
		return fmt.Errorf("field payload: contentType %q is not JSON, so the payload must be a string of its bytes in standard base64", contentType)
	}
	if _, err := base64.StdEncoding.DecodeString(s); err != nil {
		return fmt.Errorf("field payload: contentType %q is not JSON, so the payload must be standard base64: %w", contentType, err)
	}
	return nil
}

// plainString is the text of p when p is a JSON string with no escape and
// no line break (the base64 of a payload never has one): its text is then
// its value.
func plainString(p []byte) ([]byte, bool) {
	if len(p) < 2 || p[0] != '"' || p[len(p)-1] != '"' {
		return nil, false
	}
	inner := p[1 : len(p)-1]
	// The base64 decoder skips \r and \n, which a JSON string may not hold
	// raw; any other control character is not base64 to it either.
	for _, c := range []byte{'"', '\\', '\r', '\n'} {
		if bytes.IndexByte(inner, c) >= 0 {
			return nil, false
		}
	}
	return inner, true
}

// encodeInline is inv's message for invoke.<ns>.<pool> when it fits in
// one NATS message with its payload (inline false: the payload goes by
// reference). It stores nothing, so accept can charge the namespace the
// message's size before its Record exists.
func (s *Server) encodeInline(inv messages.Invocation) (b []byte, inline bool, err error) {
	maxPayload := s.cfg.NC.MaxPayload()
	if !objects.Inline(int64(len(inv.Payload)), maxPayload) {
		return nil, false, nil
	}
	if b, err = messages.Encode(inv); err != nil {
		return nil, false, err
	}
	// Headers and attributes count too.
	return b, objects.Inline(int64(len(b)), maxPayload) || len(inv.Payload) == 0, nil
}

// encode encodes inv for invoke.<ns>.<pool>. An invocation that would not
// fit in one NATS message has its payload moved to its namespace's Object Store
// bucket first, leaving a reference. A payload too big on its own is not
// encoded twice.
func (s *Server) encode(ctx context.Context, inv messages.Invocation) ([]byte, error) {
	if b, inline, err := s.encodeInline(inv); err != nil || inline {
		return b, err
	}
	obs, err := s.cfg.Store.Objects.Ensure(ctx, inv.Namespace)
	if err != nil {
		return nil, objectStoreFull(inv, err)
	}
	ref, err := objects.Put(ctx, obs, objects.PayloadName(inv.Namespace, inv.InvocationID), inv.Payload, s.cfg.NC.MaxPayload())
	if err != nil {
		return nil, objectStoreFull(inv, err)
	}
	inv.Payload, inv.PayloadRef = nil, &ref
	return messages.Encode(inv)
}

// errBodyUnavailable: a Record's response body object cannot be read.
type errBodyUnavailable struct{ err error }

func (e *errBodyUnavailable) Error() string { return e.err.Error() }
func (e *errBodyUnavailable) Unwrap() error { return e.err }

// resolve reads the response body a Record holds by reference into
// Response.Body, so callers see the Record as if it had been inline. The
// reference must name the Record's own namespace's bucket (or, for a
// Record of an older release, its pool's) and attempt's object.
func (s *Server) resolve(ctx context.Context, rec messages.Record) (messages.Record, error) {
	ref := rec.ResponseBodyRef
	if ref == nil {
		return rec, nil
	}
	rec.ResponseBodyRef = nil
	if !ownBucket(s.cfg.Store.Config.Stream, rec, ref.Bucket) || ref.Name != objects.ResultName(rec.Namespace, rec.InvocationID, rec.Attempt) {
		return rec, &errBodyUnavailable{fmt.Errorf("invocation %s: its response body reference %s/%s is not its own", rec.InvocationID, ref.Bucket, ref.Name)}
	}
	// The body as carried: binary content at the limit is base64, 4/3 of it.
	body, err := objects.Get(ctx, s.cfg.Store.JS, *ref, s.cfg.MaxPayloadBytes/3*4+4)
	if err != nil {
		return rec, &errBodyUnavailable{fmt.Errorf("invocation %s: read its response body: %w", rec.InvocationID, err)}
	}
	// A worker wrote the object: its bytes are checked here, once, and
	// made what encoding/json would answer (as they are when the framework
	// wrote them compact, as the Go framework package does).
	if body, err = rawjson.CanonicalChecked(body); err != nil {
		return rec, &errBodyUnavailable{fmt.Errorf("invocation %s: its response body object is not valid JSON: %w", rec.InvocationID, err)}
	}
	var resp messages.Response
	if rec.Response != nil {
		resp = *rec.Response
	}
	resp.Body = body
	rec.Response = &resp
	return rec, nil
}

// writeRecord answers with rec, its response body read in when it is held
// by reference (502 when that fails: the result exists but cannot be
// delivered now; a GET may retry).
func (s *Server) writeRecord(w http.ResponseWriter, ctx context.Context, code int, rec messages.Record) {
	full, err := s.resolve(ctx, rec)
	if err != nil {
		s.cfg.Logger.Warn("response body", "invocation", rec.InvocationID, "err", err)
		s.reject(w, http.StatusBadGateway, err.Error())
		return
	}
	parts, err := callback.EncodeParts(callback.Invocation(full))
	if err != nil {
		s.cfg.Logger.Warn("encode invocation", "invocation", rec.InvocationID, "err", err)
		s.reject(w, http.StatusBadGateway, fmt.Sprintf("invocation %s: its answer cannot be encoded", rec.InvocationID))
		return
	}
	httpjson.WriteEncoded(w, code, parts...)
}
