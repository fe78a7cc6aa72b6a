package natscallout

import (
	"github.com/nats-io/jwt/v2"
)

// WorkerSubjects are the subjects one worker uses. The queue's subject
// layout fills them for an Identity; everything else is denied.
type WorkerSubjects struct {
	// Stream holds the worker's dispatches; Consumer is its durable pull
	// consumer there, filtered to Dispatch (created by the queue).
	Stream, Consumer, Dispatch string
	// Cancel is where cancels addressed to the worker arrive (core NATS).
	Cancel string
	// Publish are the subjects it publishes results and events on.
	Publish []string
	// Replies matches the reply subjects of its pool's sync callers.
	Replies string
	// ObjectBucket is its namespace's Object Store bucket, where payloads and
	// results too big for one message go ("": none). Its stream is
	// OBJ_<bucket>, its subjects $O.<bucket>.>.
	ObjectBucket string
	// Inbox is its own inbox prefix (nats.CustomInboxPrefix): JetStream
	// answers its API calls and publish acks there.
	Inbox string
}

// WorkerPermissions allows exactly what the sidecar does: read its own
// consumer's info and pull and ack its messages (the queue creates the
// consumer before admitting the worker: nats-server does not check a
// consumer's deliver subject against its creator's permissions — v2.15.3
// refuses only JetStream's own subjects there — so a worker allowed to
// create consumers could have another tenant's subjects delivered to),
// publish its results and events, answer its pool's sync
// callers, read and store its namespace's objects, and hear its cancels and its
// inbox. No other JetStream API.
func WorkerPermissions(s WorkerSubjects) jwt.Permissions {
	var p jwt.Permissions
	p.Pub.Allow.Add(
		"$JS.API.CONSUMER.INFO."+s.Stream+"."+s.Consumer,
		"$JS.API.CONSUMER.MSG.NEXT."+s.Stream+"."+s.Consumer,
		"$JS.ACK."+s.Stream+"."+s.Consumer+".>",
		s.Replies,
	)
	p.Pub.Allow.Add(s.Publish...)
	if b := s.ObjectBucket; b != "" {
		// Its namespace's bucket only: open it (stream info), read objects
		// with direct gets (no consumers: see above), store objects
		// (chunks and metadata). No purge or delete: objects expire with
		// the bucket's TTL.
		p.Pub.Allow.Add(
			"$JS.API.STREAM.INFO.OBJ_"+b,
			"$JS.API.DIRECT.GET.OBJ_"+b,
			"$JS.API.DIRECT.GET.OBJ_"+b+".>",
			"$O."+b+".>",
		)
	}
	p.Sub.Allow.Add(s.Cancel, s.Inbox+".>")
	return p
}
