package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/objects"
	"github.com/runplane/runplane/internal/rawjson"
)

// bucket is this worker's namespace's Object Store bucket: the only one
// its NATS user may read or write.
func (s *Sidecar) bucket() string {
	return objects.Bucket(s.cfg.StreamName, s.cfg.WorkerNamespace)
}

// payload returns d's payload, read from the namespace's bucket when d
// carries it by reference. The reference comes from the activator (on this
// worker's own dispatch subject); it must name this namespace's bucket and d's
// own object, and the bytes must match its size and digest.
func (s *Sidecar) payload(ctx context.Context, d messages.Dispatch) (json.RawMessage, error) {
	ref := d.PayloadRef
	if ref == nil {
		return d.Payload, nil
	}
	if ref.Bucket != s.bucket() || ref.Name != objects.PayloadName(s.cfg.WorkerNamespace, d.InvocationID) {
		return nil, fmt.Errorf("payload reference %s/%s is not this invocation's: %w", ref.Bucket, ref.Name, objects.ErrCorrupt)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	b, err := objects.Get(ctx, s.js, *ref, 0)
	if err != nil {
		return nil, fmt.Errorf("read the payload: %w", err)
	}
	return b, nil
}

// objectStore opens the namespace's bucket once (its stream info is all that
// is read).
func (s *Sidecar) objectStore(ctx context.Context) (jetstream.ObjectStore, error) {
	if obs := s.obs.Load(); obs != nil {
		return *obs, nil
	}
	obs, err := s.js.ObjectStore(ctx, s.bucket())
	if err != nil {
		return nil, fmt.Errorf("open object store bucket %s: %w", s.bucket(), err)
	}
	s.obs.Store(&obs)
	return obs, nil
}

// encodeResult encodes res for the results stream. A result that does not
// fit in one message (the server's max_payload, the results stream's
// limit) sends its response body by reference: the body goes to the
// namespace's bucket first, retried a few times; when it cannot be stored the
// result becomes failed with the reason — it is never a reason to run the
// framework again.
func (s *Sidecar) encodeResult(res messages.Result, d messages.Dispatch) ([]byte, messages.Result, error) {
	limit := s.nc.MaxPayload()
	if d.ResultMsgMaxBytes > 0 {
		limit = min(limit, d.ResultMsgMaxBytes)
	}
	// A body that alone is too big is not encoded twice.
	if res.Response == nil || objects.Inline(int64(len(res.Response.Body)), limit) {
		data, err := encodeInline(res)
		if err != nil {
			return nil, res, fmt.Errorf("encode result: %w", err)
		}
		if res.Response == nil || objects.Inline(int64(len(data)), limit) {
			return data, res, nil
		}
	}
	var err error
	body := res.Response.Body
	resp := *res.Response
	resp.Body = nil
	res.Response = &resp
	var ref messages.ObjectRef
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Steps: 5}
	for backoff.Steps > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var obs jetstream.ObjectStore
		if obs, err = s.objectStore(ctx); err == nil {
			ref, err = objects.Put(ctx, obs, objects.ResultName(s.cfg.WorkerNamespace, res.InvocationID, res.Attempt), body, limit)
		}
		cancel()
		if err == nil {
			break
		}
		s.log.Warn("store response body", "invocation", res.InvocationID, "bytes", len(body), "err", err)
		time.Sleep(backoff.Step())
	}
	if err != nil {
		res.State = messages.StateFailed
		res.Error = fmt.Sprintf("the framework answered, but its response body of %d bytes could not be stored: %v", len(body), err)
		s.metrics.bodiesUnstored.Inc()
	} else {
		res.ResponseBodyRef = &ref
	}
	data, err := json.Marshal(res)
	if err != nil {
		return nil, res, fmt.Errorf("encode result: %w", err)
	}
	return data, res, nil
}

// encodeInline is json.Marshal(res) with its response body placed as it is
// (rawjson.Marshal): the framework client decoded it, so it is valid JSON,
// and the activator, which decodes every result (a worker's bytes), writes
// it into the Record as encoding/json does.
func encodeInline(res messages.Result) ([]byte, error) {
	if res.Response == nil {
		return json.Marshal(res)
	}
	resp := *res.Response // the placeholder goes into a copy: res's Response is the caller's
	res.Response = &resp
	return rawjson.Marshal(&res, &resp.Body)
}
