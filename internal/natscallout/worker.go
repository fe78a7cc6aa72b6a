package natscallout

import (
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/runplane/runplane/api"
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
	api := api.WorkerJSAPIPrefix
	p.Pub.Allow.Add(
		api+jsConsumerInfo+s.Stream+"."+s.Consumer,
		api+jsConsumerNext+s.Stream+"."+s.Consumer,
		jsAck+s.Stream+"."+s.Consumer+".>",
		s.Replies,
	)
	p.Pub.Allow.Add(s.Publish...)
	if b := s.ObjectBucket; b != "" {
		// Its namespace's bucket only: open it (stream info), read objects
		// with direct gets (no consumers: see above), store objects
		// (chunks and metadata). No purge or delete: objects expire with
		// the bucket's TTL.
		p.Pub.Allow.Add(
			api+jsStreamInfo+"OBJ_"+b,
			api+jsDirectGet+"OBJ_"+b,
			api+jsDirectGet+"OBJ_"+b+".>",
			objectsPrefix+b+".>",
		)
	}
	p.Sub.Allow.Add(s.Cancel, s.Inbox+".>")
	return p
}

// JetStream API families a worker reaches through its account's imports,
// after the API prefix (RUNPLANE's $JS.API, the worker's
// api.WorkerJSAPIPrefix).
const (
	jsAPI          = "$JS.API"
	jsConsumerInfo = ".CONSUMER.INFO."
	jsConsumerNext = ".CONSUMER.MSG.NEXT."
	jsStreamInfo   = ".STREAM.INFO."
	jsDirectGet    = ".DIRECT.GET."
	jsAck          = "$JS.ACK."
	objectsPrefix  = "$O."
)

// WorkerImports are a worker's subjects as imports of its own account from
// RUNPLANE (account runplane): the same subjects WorkerPermissions allows,
// and no others reach RUNPLANE from the worker's account. Each request a
// worker makes through a service import is answered on a reply subject the
// server maps into RUNPLANE's own and routes back into the worker's
// account, so no reply subject a worker names reaches RUNPLANE.
func WorkerImports(s WorkerSubjects, runplane string) jwt.Imports {
	var imps jwt.Imports
	service := func(subjects ...string) {
		for _, subj := range subjects {
			imps.Add(&jwt.Import{Name: subj, Subject: jwt.Subject(subj), Account: runplane, Type: jwt.Service})
		}
	}
	// The JetStream API under the worker's own prefix (WorkerJSAPIPrefix).
	api := func(subjects ...string) {
		for _, subj := range subjects {
			imps.Add(&jwt.Import{Name: subj, Subject: jwt.Subject(jsAPI + subj), LocalSubject: jwt.RenamingSubject(api.WorkerJSAPIPrefix + subj),
				Account: runplane, Type: jwt.Service})
		}
	}
	api(jsConsumerInfo+s.Stream+"."+s.Consumer, jsConsumerNext+s.Stream+"."+s.Consumer)
	service(jsAck+s.Stream+"."+s.Consumer+".>", s.Replies)
	service(s.Publish...)
	if b := s.ObjectBucket; b != "" {
		api(jsStreamInfo+"OBJ_"+b, jsDirectGet+"OBJ_"+b, jsDirectGet+"OBJ_"+b+".>")
		service(objectsPrefix + b + ".>")
	}
	imps.Add(&jwt.Import{Name: s.Cancel, Subject: jwt.Subject(s.Cancel), Account: runplane, Type: jwt.Stream})
	return imps
}

// WorkerExports are what RUNPLANE offers the worker accounts: the
// JetStream API families a worker uses, its objects, and the layout's
// publish subjects and cancels with wildcards for namespace, pool and
// worker. They are public: only accounts the operator signs can import,
// and the operator is the queue, which imports into each worker's account
// only that worker's subjects (WorkerImports).
//
// Every request a worker sends through a service import with a reply
// subject makes the server keep a reply mapping in RUNPLANE until the
// answer or the export's response threshold, and nats-server bounds their
// number by nothing else: a worker flooding its own events subject with
// reply subjects held 300,000 mappings (98 MiB of the shared server's
// heap) after 3 s under a 5-minute threshold. So each threshold is as
// short as its answer needs: JetStream answers a publish, an ack, an info
// or a direct get in milliseconds (2 s leaves a loaded server room), and a
// pull (ResponseTypeStream, several messages) for as long as the sidecar's
// pull waits (pullThreshold).
func WorkerExports(publish []string, cancel string, pullThreshold time.Duration) jwt.Exports {
	const answerThreshold = 2 * time.Second
	var exps jwt.Exports
	service := func(rt jwt.ResponseType, threshold time.Duration, subjects ...string) {
		for _, subj := range subjects {
			exps.Add(&jwt.Export{Name: subj, Subject: jwt.Subject(subj), Type: jwt.Service, ResponseType: rt, ResponseThreshold: threshold})
		}
	}
	service(jwt.ResponseTypeSingleton, answerThreshold, jsAPI+jsConsumerInfo+">", jsAck+">", jsAPI+jsStreamInfo+">", objectsPrefix+">")
	service(jwt.ResponseTypeStream, answerThreshold, jsAPI+jsDirectGet+">")
	service(jwt.ResponseTypeStream, pullThreshold, jsAPI+jsConsumerNext+">")
	service(jwt.ResponseTypeSingleton, answerThreshold, publish...)
	exps.Add(&jwt.Export{Name: cancel, Subject: jwt.Subject(cancel), Type: jwt.Stream})
	return exps
}
