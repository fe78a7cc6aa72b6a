package ingress

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/objects"
)

// objectStoreFull turns a failure to store a big payload into the
// answer the caller gets: a full namespace bucket (its budget,
// -objects-max-bytes, is used up) or a bucket JetStream has no room to
// create is a storeFullError (503, Retry-After) naming the limit; anything
// else stays an error (503 too, with the cause).
func objectStoreFull(inv messages.Invocation, err error) error {
	var noRoom *objects.NoRoomError
	if errors.As(err, &noRoom) {
		return &storeFullError{why: fmt.Sprintf("no object storage for namespace %s's big payloads: %v", inv.Namespace, noRoom)}
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeStreamStoreFailed {
		return &storeFullError{why: fmt.Sprintf("namespace %s's object storage budget (-objects-max-bytes) is used up by its big payloads and results "+
			"until they expire: %v", inv.Namespace, err)}
	}
	return fmt.Errorf("store the payload of invocation %s: %w", inv.InvocationID, err)
}

// jsErrCodeStreamStoreFailed is nats-server's JSStreamStoreFailedF, the
// answer to a publish into a stream at its MaxBytes with discard new
// ("maximum bytes exceeded"), from one server and from a cluster alike
// (stream.TestSentinelsTheQueueReads); nats.go names no constant for it.
// (jetstream.ErrMaxBytesExceeded, once tested here too, is a pull
// request's status, never an answer to a publish.)
const jsErrCodeStreamStoreFailed jetstream.ErrorCode = 10077

// ownBucket reports whether bucket is where rec's objects may be: its
// namespace's bucket, or the per-pool bucket of the release before
// (Records written then, read until they expire).
func ownBucket(streamName string, rec messages.Record, bucket string) bool {
	return bucket == objects.Bucket(streamName, rec.Namespace) || bucket == objects.PoolBucket(streamName, rec.Namespace, rec.Pool)
}
