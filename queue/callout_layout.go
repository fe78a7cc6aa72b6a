package queue

import (
	"github.com/nats-io/jwt/v2"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/natscallout"
	"github.com/runplane/runplane/queue/stream"
	"github.com/runplane/runplane/sidecar"
)

// workerPermit grants a worker sidecar exactly the subjects of the queue's
// layout that the sidecar uses (see natscallout.WorkerPermissions).
func workerPermit(sc stream.Config) natscallout.Permit {
	subj := messages.Subjects{Prefix: sc.Prefix}
	return func(id natscallout.Identity) jwt.Permissions {
		return natscallout.WorkerPermissions(workerSubjects(subj, sc.Stream, id))
	}
}

// TODO(merge): namespaced subjects from helper A's contract.
func workerSubjects(subj messages.Subjects, streamName string, id natscallout.Identity) natscallout.WorkerSubjects {
	return natscallout.WorkerSubjects{
		Stream:   streamName,
		Consumer: sidecar.ConsumerName(id.Pool, id.Worker),
		Dispatch: subj.Dispatch(id.Pool, id.Worker),
		Cancel:   subj.Cancel(id.Pool, id.Worker),
		Publish:  []string{subj.Result(id.Pool), subj.Metrics(id.Pool)},
		Replies:  "_INBOX.>",
		Inbox:    "_INBOX_RP." + id.Namespace + "." + id.Pool + "." + id.Worker,
	}
}
