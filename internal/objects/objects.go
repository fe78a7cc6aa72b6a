// Package objects keeps the payloads and response bodies that do not fit in
// one NATS message (max_payload) in JetStream Object Store buckets, and
// hands them around by reference (messages.ObjectRef).
//
// There is one bucket per namespace (a tenant), named after it (Bucket)
// and shared by the namespace's pools: NATS grants permissions per subject,
// an object's chunks live on a random subject ($O.<bucket>.C.<nuid>) and its
// metadata on the base64 of its name, so a bucket is the finest unit a
// worker can be allowed. Its MaxBytes is the namespace's budget: tenants
// create pools at will, and a bucket per pool (as before) let one tenant
// reserve and fill as much of JetStream's shared storage as it had pools
// (nats-server reserves a stream's MaxBytes at creation and refuses a
// stream that does not fit: "insufficient storage resources"). Buckets
// expire objects after Config.TTL (longer than the invocation Records they
// belong to), so nothing outlives its Record by more than the margin.
//
// Writers use the library's ObjectStore.Put. Readers use Get, which reads
// the chunks with direct gets: the library's ObjectStore.Get creates an
// ordered push consumer, and a worker may not create consumers (nats-server
// does not check a consumer's deliver subject against its creator's
// permissions). Get checks size and digest against the reference it was
// handed, never the object's own metadata, which any worker of the pool
// could rewrite.
package objects

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/runplane/runplane/internal/jsensure"
	"github.com/runplane/runplane/internal/messages"
)

// DefaultMaxPayloadBytes is the default limit of one payload or response
// body (64 MiB).
const DefaultMaxPayloadBytes = 64 << 20

// Headroom is what a message keeps free of max_payload for everything but
// the payload or body (envelope fields, headers): a payload or body is
// inline when its message fits in max_payload - Headroom.
const Headroom = 16 << 10

// ChunkSize is the size of an object's chunks (one message each): at most
// half of max_payload.
func ChunkSize(maxPayload int64) int {
	return int(max(min(256<<10, maxPayload/2), 1024))
}

// Inline reports whether a message of size bytes may be sent as it is on a
// connection whose server allows maxPayload bytes per message.
func Inline(size, maxPayload int64) bool { return size <= maxPayload-Headroom }

// Bucket is the Object Store bucket of namespace ns under the invocation
// stream's name: "<stream>_OBJ_<ns>" (a namespace is a DNS-1123 label,
// without '_' or '.', so the name is unambiguous and one subject token).
func Bucket(streamName, ns string) string { return streamName + "_OBJ_" + ns }

// PoolBucket is the per-pool bucket of releases before namespace buckets,
// "<stream>_OBJ_<ns>_<pool>": Records written then may still name it, and
// the queue (never a worker) reads them until they expire.
func PoolBucket(streamName, ns, pool string) string { return Bucket(streamName, ns) + "_" + pool }

// StreamName is the stream that backs bucket.
func StreamName(bucket string) string { return "OBJ_" + bucket }

// PayloadName is the object of invocation id's payload in namespace ns.
func PayloadName(ns, id string) string { return ns + "/" + id + "/payload" }

// ResultName is the object of the response body of an attempt.
func ResultName(ns, id string, attempt int) string {
	return ns + "/" + id + "/result/" + strconv.Itoa(attempt)
}

// Config sizes the buckets.
type Config struct {
	// StreamName is the invocation stream's name, the buckets' prefix.
	StreamName string
	// TTL is how long an object is kept: at least the Records' TTL, so a
	// Record never names an object that is gone.
	TTL time.Duration
	// MaxBytes bounds one namespace's bucket, the tenant's budget of
	// object storage (-1: unbounded, no budget); a full bucket refuses new
	// objects. JetStream reserves it when the bucket is created.
	MaxBytes int64
	// Replicas of each bucket (default 1).
	Replicas int
}

// ErrTooLarge reports a payload or body over the limit.
var ErrTooLarge = errors.New("over the size limit")

// ErrCorrupt reports an object that is not what its reference says (size,
// chunks, digest): changed since, or never complete.
var ErrCorrupt = errors.New("object does not match its reference")

// Permanent reports whether a Get error will not go away by retrying: the
// object (or its bucket) is gone, or it does not match its reference.
func Permanent(err error) bool {
	return errors.Is(err, ErrTooLarge) || errors.Is(err, ErrCorrupt) || errors.Is(err, jetstream.ErrMsgNotFound) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound)
}

// Buckets opens (and creates) the namespaces' buckets with one
// connection, remembering those it has made sure of. The queue creates
// them; workers only open their own namespace's.
type Buckets struct {
	JS  jetstream.JetStream
	Cfg Config

	buckets jsensure.Cache[jetstream.ObjectStore]
}

// NoRoomError is a bucket JetStream would not create: its storage (the
// server's max_file_store, or the account's) has no room left to reserve
// the bucket's MaxBytes.
type NoRoomError struct {
	Bucket   string
	MaxBytes int64
	Err      error
}

func (e *NoRoomError) Error() string {
	return fmt.Sprintf("object store bucket %s of %d bytes (the namespace's budget, -objects-max-bytes): JetStream storage has no room left to reserve it "+
		"(size max_file_store for namespaces × budget + the streams): %v", e.Bucket, e.MaxBytes, e.Err)
}

func (e *NoRoomError) Unwrap() error { return e.Err }

// createTry bounds one try of a bucket's create (Ensure).
const createTry = 10 * time.Second

// Ensure creates (or updates to Cfg) the bucket of namespace ns once per
// process and returns it. A bucket JetStream has no room for is a
// *NoRoomError, tried again once jsensure.RetryAfter has passed.
func (b *Buckets) Ensure(ctx context.Context, ns string) (jetstream.ObjectStore, error) {
	name := Bucket(b.Cfg.StreamName, ns)
	return b.buckets.Get(name, func() (jetstream.ObjectStore, error) {
		maxBytes := cmp.Or(b.Cfg.MaxBytes, -1)
		cfg := jetstream.ObjectStoreConfig{
			Bucket:      name,
			Description: "payloads and results of namespace " + ns + " too big for one NATS message",
			TTL:         b.Cfg.TTL,
			MaxBytes:    maxBytes,
			Storage:     jetstream.FileStorage,
			Replicas:    cmp.Or(b.Cfg.Replicas, 1),
		}
		// Each try bounded: a create's answer lost on a cluster at load
		// held a caller for its whole context (2 minutes in a test);
		// asked again, it is answered (the create is idempotent).
		var obs jetstream.ObjectStore
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			try, cancel := context.WithTimeout(ctx, createTry)
			defer cancel()
			var err error
			obs, err = b.JS.CreateOrUpdateObjectStore(try, cfg)
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				return false, nil
			}
			return err == nil, err
		})
		switch {
		case jsensure.NoRoom(err):
			return nil, &NoRoomError{Bucket: name, MaxBytes: maxBytes, Err: err}
		case err != nil:
			return nil, fmt.Errorf("object store bucket %s: %w", name, err)
		}
		return obs, nil
	})
}

// Put stores data as object name of obs and returns its reference.
func Put(ctx context.Context, obs jetstream.ObjectStore, name string, data []byte, maxPayload int64) (messages.ObjectRef, error) {
	info, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name, Opts: &jetstream.ObjectMetaOptions{ChunkSize: uint32(ChunkSize(maxPayload))}},
		bytes.NewReader(data))
	if err != nil {
		return messages.ObjectRef{}, fmt.Errorf("store object %s: %w", name, err)
	}
	return messages.ObjectRef{Bucket: info.Bucket, Name: info.Name, NUID: info.NUID, Size: int64(info.Size), Chunks: int(info.Chunks), Digest: info.Digest}, nil
}

// Digest is the Object Store's digest string of data.
func Digest(data []byte) string {
	h := sha256.New()
	h.Write(data)
	return jetstream.GetObjectDigestValue(h)
}

// Get reads the object ref names, chunk by chunk with direct gets, and
// checks it against ref: its size (at most limit, when limit > 0) and its
// digest. A missing chunk, a foreign one or a changed object is an error.
func Get(ctx context.Context, js jetstream.JetStream, ref messages.ObjectRef, limit int64) ([]byte, error) {
	if limit > 0 && ref.Size > limit {
		return nil, fmt.Errorf("object %s of %d bytes: %w of %d bytes", ref.Name, ref.Size, ErrTooLarge, limit)
	}
	if ref.NUID == "" || ref.Bucket == "" {
		return nil, fmt.Errorf("object reference %q: no bucket or chunk id", ref.Name)
	}
	st, err := js.Stream(ctx, StreamName(ref.Bucket))
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", ref.Bucket, err)
	}
	subj := "$O." + ref.Bucket + ".C." + ref.NUID
	data := make([]byte, 0, ref.Size)
	seq := uint64(1)
	// A miss is read again only where a follower can answer it.
	replicated := st.CachedInfo().Config.Replicas > 1
	for range ref.Chunks {
		m, err := nextChunk(ctx, st, seq, subj, replicated)
		if err != nil {
			return nil, fmt.Errorf("read object %s of bucket %s, %d of %d bytes: %w", ref.Name, ref.Bucket, len(data), ref.Size, err)
		}
		if int64(len(data)+len(m.Data)) > ref.Size {
			return nil, fmt.Errorf("object %s of bucket %s is longer than its %d bytes: %w", ref.Name, ref.Bucket, ref.Size, ErrCorrupt)
		}
		data = append(data, m.Data...)
		seq = m.Sequence + 1
	}
	if int64(len(data)) != ref.Size {
		return nil, fmt.Errorf("object %s of bucket %s: %d bytes, want %d: %w", ref.Name, ref.Bucket, len(data), ref.Size, ErrCorrupt)
	}
	if d := Digest(data); d != ref.Digest {
		return nil, fmt.Errorf("object %s of bucket %s: digest %s, want %s: %w", ref.Name, ref.Bucket, d, ref.Digest, ErrCorrupt)
	}
	return data, nil
}

// chunkMissRetry is how a chunk a direct get did not find is read again.
// Any replica of a replicated bucket answers a direct get, and a follower
// that has not applied the newest writes yet answers "not found" for an
// object stored a moment before: 57 of 300 reads of a 600 KB object right
// after its put through another server of three failed, and a payload read
// so failed its invocation for good (Permanent). The reads are direct gets
// because a worker may read its bucket's subjects only (package doc); a
// follower catches up within milliseconds, so a miss is read again for up
// to about 1.3 s before it is reported.
func chunkMissRetry() wait.Backoff {
	return wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Steps: 7}
}

// nextChunk reads the first message on subj at or after seq, reading a
// miss of a replicated stream again as chunkMissRetry says (a chunk that
// is really gone — an expired object, a reference a worker made up —
// costs that wait and those reads).
func nextChunk(ctx context.Context, st jetstream.Stream, seq uint64, subj string, replicated bool) (*jetstream.RawStreamMsg, error) {
	retry := chunkMissRetry()
	for {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if !replicated || !errors.Is(err, jetstream.ErrMsgNotFound) || retry.Steps == 0 {
			return m, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a chunk a replica did not have yet: %w", ctx.Err())
		case <-time.After(retry.Step()):
		}
	}
}
