package queue

import (
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/natscallout"
	"github.com/runplane/runplane/internal/objects"
	"github.com/runplane/runplane/queue/stream"
)

// WorkerLayout gives a worker sidecar exactly the subjects of the queue's
// layout that the sidecar uses (natscallout.WorkerPermissions and
// WorkerImports).
func WorkerLayout(sc stream.Config) natscallout.Layout {
	subj := messages.Subjects{Prefix: sc.Prefix}
	return func(id natscallout.Identity) natscallout.WorkerSubjects {
		return workerSubjects(subj, sc.Stream, id)
	}
}

// workerSubjects is one worker's share of the layout: its consumer on the
// stream, filtered to its dispatch subject; its cancels; its pool's
// results and sync replies, in its own namespace; its own Events subject
// (never a sibling's: the activator believes the subject about who an
// Event is from); its own inbox.
func workerSubjects(subj messages.Subjects, streamName string, id natscallout.Identity) natscallout.WorkerSubjects {
	ns, pool, worker := id.Namespace, id.Pool, id.Worker
	return natscallout.WorkerSubjects{
		Stream:   streamName,
		Consumer: messages.ConsumerName(ns, pool, worker),
		Dispatch: subj.Dispatch(ns, pool, worker),
		Cancel:   subj.Cancel(ns, pool, worker),
		// Its own events; the chunks of streamed answers under its own
		// name only (any invocation: the reader takes a chunk only from the
		// worker the Record says holds its attempt), never a sibling's,
		// another pool's or another namespace's.
		Publish: []string{subj.Result(ns, pool), subj.Events(ns, pool, worker), subj.ChunkSubject(ns, pool, worker, "*")},
		Replies: subj.Reply(ns, pool) + ".>",
		Inbox:   messages.WorkerInbox(ns, pool, worker),
		// Its namespace's bucket (the tenant's budget, shared by its
		// pools): no other namespace's objects.
		ObjectBucket: objects.Bucket(streamName, ns),
	}
}
