package callback

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Headers of a callback POST.
const (
	// SignatureHeader is "t=<unix seconds>,v1=<hex HMAC-SHA256>", the MAC
	// over "<t>.<body>" with the namespace's key: the timestamp is signed,
	// so a receiver that refuses old ones stops replays.
	SignatureHeader = "Runplane-Signature"
	// DeliveryHeader names the delivery: "<namespace>/<invocation ID>/<state>"
	// ("<namespace>/<invocation ID>/start" for the start event), the same
	// for every retry of it (receivers deduplicate on it).
	DeliveryHeader = "Runplane-Delivery"
	// EventHeader is the event: "completed", or "start" when asked for
	// (callbackEvents).
	EventHeader = "Runplane-Event"
)

// NamespaceKey is the signing key of namespace ns with UID uid:
// HMAC-SHA256 of the master key over both. One master key (a Secret in
// runplane's own namespace) yields every namespace's key, so no key lives
// in a tenant's namespace and none can be read from another tenant's; a
// caller with RBAC get on pools/callbacksigningkey in its namespace reads
// its own through the ingress. The UID makes a namespace deleted and made
// again under its name (by someone else, maybe) a new key: the new owner
// can neither verify nor forge the old owner's callbacks. uid is ""
// without Kubernetes (NoNamespaces).
func NamespaceKey(master []byte, ns, uid string) []byte {
	m := hmac.New(sha256.New, master)
	m.Write([]byte("runplane.io/callback-signing-key/v2/" + ns + "/" + uid))
	return m.Sum(nil)
}

// LegacyNamespaceKey is the key of namespace ns before keys followed the
// namespace's UID (the name alone). A callback recorded before the
// upgrade carries a MAC under it too, so its receiver, which still holds
// the old key, accepts it; nothing recorded since does.
func LegacyNamespaceKey(master []byte, ns string) []byte {
	m := hmac.New(sha256.New, master)
	m.Write([]byte("runplane.io/callback-signing-key/v1/" + ns))
	return m.Sum(nil)
}

// Sign is the SignatureHeader value of body sent at t: one v1 MAC per
// key (a receiver accepts when one of them verifies under its key).
func Sign(t time.Time, body []byte, keys ...[]byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	h := "t=" + ts
	for _, k := range keys {
		h += ",v1=" + mac(k, ts, body)
	}
	return h
}

func mac(key []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(ts + "."))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Verify checks a SignatureHeader value: a v1 MAC of body under key, and a
// timestamp within tolerance of now (what a receiver does; see the
// package README).
func Verify(key []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs []string
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("signature: no timestamp t")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("signature: timestamp %s is %s from now, beyond %s (a replay?)", time.Unix(sec, 0).UTC(), d, tolerance)
	}
	want := mac(key, ts, body)
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			return nil
		}
	}
	return errors.New("signature: no v1 MAC matches the body")
}
