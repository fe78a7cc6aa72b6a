package callback

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	v1 "github.com/runplane/runplane/api/serverless/v1"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/rawjson"
)

// Invocation is what a caller is shown of Record r: a callback's body, and
// (through the ingress) the answers of GET, cancel, a sync invoke and a
// stream's result event. A field is copied by name, so one added to the
// Record reaches no caller until it is added here and to v1 (TestInvocation
// fails until it is listed as shown or hidden). Hidden: the stream and its
// sequence (a position all tenants share), the request hash, the namespace
// UID (callback.keyID is an opaque ID derived from it), the response body's
// object reference (the ingress reads it into the body first) and the
// stream bytes charged.
func Invocation(r messages.Record) v1.Invocation {
	out := v1.Invocation{InvocationID: r.InvocationID, Namespace: r.Namespace, Pool: r.Pool, Mode: v1.Mode(r.Mode), State: v1.State(r.State),
		Worker: r.Worker, Attempt: r.Attempt, Error: r.Error, Retries: r.Retries, AcceptedAt: r.AcceptedAt, UpdatedAt: r.UpdatedAt}
	if r.Response != nil {
		resp := v1.Response(*r.Response)
		out.Response = &resp
	}
	for _, a := range r.Attempts {
		out.Attempts = append(out.Attempts, v1.Attempt{Attempt: a.Attempt, Worker: a.Worker, State: v1.AttemptState(a.State), StatusCode: a.StatusCode,
			Error: a.Error, StartedAt: a.StartedAt, FinishedAt: a.FinishedAt, RetryAt: a.RetryAt})
	}
	if c := r.Callback; c != nil {
		out.Callback = &v1.Callback{URL: c.URL, KeyID: KeyID(c.KeyID), State: v1.CallbackState(c.State), Attempts: callbackAttempts(c.Attempts)}
		for _, e := range c.Events {
			out.Callback.Events = append(out.Callback.Events, v1.CallbackEvent(e))
		}
		if c.Start != nil {
			out.Callback.Start = &v1.CallbackDelivery{State: v1.CallbackState(c.Start.State), Attempts: callbackAttempts(c.Start.Attempts)}
		}
	}
	return out
}

// Encode is json.Marshal(inv), the caller's answer, without encoding/json's
// pass over the response body (validate, compact, HTML-escape: ~60 ms of a
// 10 MiB answer): the body is placed as it is (EncodeParts). It must
// be as encoding/json writes it — a Record's is (the activator wrote it
// with json.Marshal); a body from a worker's reply or its Object Store
// object goes through rawjson.Canonical first — so the answer is byte for
// byte json.Marshal's.
func Encode(inv v1.Invocation) ([]byte, error) {
	parts, err := EncodeParts(inv)
	if err != nil {
		return nil, err
	}
	return bytes.Join(parts, nil), nil
}

// EncodeParts is Encode in the pieces rawjson.MarshalParts makes, the
// body itself one of them: for a caller that writes them in turn.
func EncodeParts(inv v1.Invocation) ([][]byte, error) {
	if inv.Response == nil {
		b, err := json.Marshal(inv)
		return [][]byte{b}, err
	}
	resp := *inv.Response // the placeholder goes into a copy: inv's Response is the caller's
	inv.Response = &resp
	return rawjson.MarshalParts(&inv, &resp.Body)
}

func callbackAttempts(in []messages.CallbackAttempt) []v1.CallbackAttempt {
	var out []v1.CallbackAttempt
	for _, a := range in {
		out = append(out, v1.CallbackAttempt(a))
	}
	return out
}

// KeyID is the ID callers are shown of the key of the namespace with UID
// uid ("" for ""): the key follows the UID, and the ID tells a receiver
// its key is stale without showing the UID itself.
func KeyID(uid string) string {
	if uid == "" {
		return ""
	}
	sum := sha256.Sum256([]byte("runplane callback key id\x00" + uid))
	return hex.EncodeToString(sum[:8])
}
