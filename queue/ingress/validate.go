package ingress

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	v1 "github.com/runplane/runplane/api/serverless/v1"
	"github.com/runplane/runplane/internal/httpjson"
	"github.com/runplane/runplane/internal/rawjson"
)

// idPattern: usable as a KV key and a Nats-Msg-Id. No '.': derived
// message IDs append ".<attempt>", which must not collide with another
// invocation's ID in the stream's duplicate window.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_=-]{1,128}$`)

// validNamespace: a namespace is a DNS-1123 label.
func validNamespace(ns string) error {
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return fmt.Errorf("namespace %q: must be a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters): %s", ns, strings.Join(errs, "; "))
	}
	return nil
}

// validPool: a pool name is the value of a runplane.io/pool label, which
// admission requires to be a DNS-1123 label.
func validPool(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("pool %q: must be a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters), as the runplane.io/pool label: %s",
			name, strings.Join(errs, "; "))
	}
	return nil
}

// validID: an invocation ID is 1-128 of A-Z a-z 0-9 _ = -.
func validID(field, id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("%s %q: must be 1-128 characters of A-Z a-z 0-9 _ = -", field, id)
	}
	return nil
}

// decodeBody reads exactly one JSON object, of contentLength bytes (-1:
// not known) and at most limit, into req: unknown fields (named in the
// error) and anything after the object are refused. The body is read
// whole and scanned once; a payload that is most of it is a slice of it
// (rawjson.UnmarshalStrict: a json.Decoder scanned a 10 MiB payload three
// times and copied it four, ~100 ms of the call).
func decodeBody(body io.Reader, contentLength, limit int64, req *v1.InvokeRequest) error {
	b, err := httpjson.ReadBody(body, contentLength, limit)
	if err != nil {
		return err
	}
	return rawjson.UnmarshalStrict(b, req, "payload", &req.Payload)
}

func (s *Server) validate(req *v1.InvokeRequest) error {
	switch req.Mode {
	case v1.ModeSync, v1.ModeAsync:
	case "":
		return errors.New("field mode is required: sync or async")
	default:
		return fmt.Errorf("field mode %q: must be sync or async", req.Mode)
	}
	if req.InvocationID != "" {
		if err := validID("field invocationID", req.InvocationID); err != nil {
			return err
		}
	}
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > s.cfg.MaxTimeoutSeconds {
		return fmt.Errorf("field timeoutSeconds %d: must be between 0 (default %d) and %d", req.TimeoutSeconds, s.cfg.DefaultTimeoutSeconds, s.cfg.MaxTimeoutSeconds)
	}
	if req.TTLSeconds < 0 || req.TTLSeconds > s.cfg.MaxTTLSeconds {
		return fmt.Errorf("field ttlSeconds %d: must be between 0 (default %d) and %d", req.TTLSeconds, s.cfg.DefaultTTLSeconds, s.cfg.MaxTTLSeconds)
	}
	return validPayload(req.ContentType, req.Payload)
}

// requestHash is the SHA-256 of what an invocation hands its worker, in a
// canonical form (object keys sorted, no insignificant space, numbers as
// written): payload, headers, attributes and contentType. A re-post of an
// invocation ID must have the same. Not part of it: the mode and
// timeoutSeconds (a re-post may wait, or wait longer, for the same result;
// the first request's limits stay in force), ttlSeconds, and the routing
// fields (pool, namespace: checked on their own).
//
// The form is json.Marshal of {payload, headers, attributes, contentType}
// with the payload decoded into an any (the stored Records' hashes were
// made so): rawjson.WriteSorted writes the payload's part of it straight
// into the hash, without decoding it (a 10 MiB payload cost ~110 ms so).
func requestHash(req v1.InvokeRequest) (string, error) {
	// The fields after the payload, encoded by encoding/json: their "{" is
	// the payload's "," in the form.
	rest, err := json.Marshal(struct {
		Headers     map[string]string `json:"headers"`
		Attributes  map[string]string `json:"attributes"`
		ContentType string            `json:"contentType"`
	}{req.Headers, req.Attributes, req.ContentType})
	if err != nil {
		return "", fmt.Errorf("canonical request: %w", err)
	}
	h := sha256.New()
	h.Write([]byte(`{"payload":`))
	if len(req.Payload) == 0 {
		h.Write([]byte("null"))
	} else if err := rawjson.WriteSorted(h, req.Payload); err != nil {
		return "", fmt.Errorf("field payload: %w", err)
	}
	h.Write([]byte(","))
	h.Write(rest[1:])
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
