package queue

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/internal/natscallout"
)

// NamespaceBuckets makes a namespace's Object Store bucket
// (objects.Buckets).
type NamespaceBuckets interface {
	Ensure(ctx context.Context, ns string) (jetstream.ObjectStore, error)
}

// ensureBucket makes the admitted worker's namespace bucket, where it
// stores results too big for one message (a worker may not create it). A
// failure — JetStream storage with no room left for this namespace's
// budget, say — is logged and does not refuse the worker: its results that
// fit in a message still go through, and the ingress tries again on its
// namespace's next invocation. Admission of other namespaces' workers never
// depends on this namespace's bucket.
func (a *admitWorker) ensureBucket(ctx context.Context, id natscallout.Identity) {
	if a.Buckets == nil {
		return
	}
	if _, err := a.Buckets.Ensure(ctx, id.Namespace); err != nil && a.Log != nil {
		a.Log.Warn("admitting a worker without its namespace's object store bucket: its results too big for one message fail until the bucket exists",
			"namespace", id.Namespace, "pool", id.Pool, "worker", id.Worker, "err", err)
	}
}
