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

// NamespaceChunks makes a namespace's chunks stream (stream.ChunkStreams).
type NamespaceChunks interface {
	Ensure(ctx context.Context, ns string) (jetstream.Stream, error)
}

// ensureChunks makes the admitted worker's namespace chunks stream, where
// it relays streamed answers (a worker may not create it). As for the
// bucket, a failure (no room left in JetStream storage to reserve the
// namespace's -chunks-max-bytes) is logged and never refuses the worker:
// only its streamed answers fail, and no other namespace's admission
// depends on it.
func (a *admitWorker) ensureChunks(ctx context.Context, id natscallout.Identity) {
	if a.Chunks == nil {
		return
	}
	if _, err := a.Chunks.Ensure(ctx, id.Namespace); err != nil && a.Log != nil {
		a.Log.Warn("admitting a worker without its namespace's chunks stream: its streamed answers fail until the stream exists",
			"namespace", id.Namespace, "pool", id.Pool, "worker", id.Worker, "err", err)
	}
}
