package ingress

import (
	"fmt"
	"time"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/stream"
)

// The reasons of a 429 for a namespace's byte budgets (limitError).
const (
	ReasonNamespaceStreamBytes = "namespace_stream_bytes"
	ReasonNamespaceRecordBytes = "namespace_record_bytes"
)

// newRecordBytes is what a new invocation's Record is counted for before
// it is written (a queued Record, without result, is well below it).
const newRecordBytes = 1 << 10

// refBytes is what a payload's object reference adds to a message, at
// most (bucket and object names, size, digest).
const refBytes = 512

// messageBytes is what inv's message holds in the invocation stream: b,
// its encoding when inline (encodeInline), or its encoding without the
// payload and with a reference (a payload too big for one message is in
// the namespace's object bucket instead). What the stream stores besides
// (subject, headers) is messageOverhead.
func messageBytes(inv messages.Invocation, b []byte, inline bool) (int64, error) {
	if !inline {
		inv.Payload = nil
		var err error
		if b, err = messages.Encode(inv); err != nil {
			return 0, err
		}
		return int64(len(b)) + refBytes + messageOverhead, nil
	}
	return int64(len(b)) + messageOverhead, nil
}

// reserveBytes counts inv (whose message holds size bytes) against its
// namespace's byte budgets until the watch delivers its Record, which
// counts it from then on (release gives the room back at once: call it
// when the accept failed): a limitError (429, that namespace only) when it
// does not fit. The invocation needs room for its message and its first
// Dispatch.
func (s *Server) reserveBytes(inv messages.Invocation, size int64) (func(), error) {
	if s.usage == nil {
		return func() {}, nil
	}
	if !s.watched.Load() {
		return nil, &storeFullError{why: "the namespaces' shares of the store are still being counted from the Records bucket (the queue just started)"}
	}
	lim := s.cfg.Limits
	t, ok, release := s.usage.Reserve(stream.Key(inv.Namespace, inv.InvocationID), 2*size, newRecordBytes, lim.NamespaceMaxStreamBytes, lim.NamespaceMaxRecordBytes)
	if ok {
		return release, nil
	}
	le := &limitError{Namespace: inv.Namespace, Pool: inv.Pool}
	if lim.NamespaceMaxStreamBytes > 0 && t.Stream+2*size > lim.NamespaceMaxStreamBytes {
		le.Reason, le.Max, le.Used, le.Need = ReasonNamespaceStreamBytes, int(lim.NamespaceMaxStreamBytes), t.Stream, 2*size
		return nil, le
	}
	le.Reason, le.Max, le.Used, le.Need = ReasonNamespaceRecordBytes, int(lim.NamespaceMaxRecordBytes), t.Records, newRecordBytes
	// Room comes back as the namespace's settled Records expire.
	if !t.NextExpiry.IsZero() {
		le.RetryAfter = max(int(time.Until(t.NextExpiry).Seconds())+1, 1)
	}
	return nil, le
}

// budgetMessage is the text of a byte budget's 429.
func (e *limitError) budgetMessage() string {
	if e.Reason == ReasonNamespaceStreamBytes {
		return fmt.Sprintf("namespace %q holds %d bytes of the invocation stream with its queued and running invocations; this one needs %d more, beyond "+
			"the namespace's budget of %d bytes (-namespace-max-stream-bytes, chart queue.limits.namespaceMaxStreamBytes): retry when some have finished",
			e.Namespace, e.Used, e.Need, e.Max)
	}
	return fmt.Sprintf("namespace %q holds %d bytes of the Records bucket with its invocations' Records (kept -record-ttl after their last change), "+
		"at the namespace's budget of %d bytes (-namespace-max-record-bytes, chart queue.limits.namespaceMaxRecordBytes): retry when older Records have expired",
		e.Namespace, e.Used, e.Max)
}
