package stream

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/internal/jsensure"
	"github.com/runplane/runplane/internal/messages"
)

// ChunksConfig sizes the namespaces' chunks streams
// (messages.ChunksStreamName): the retained output of streamed
// invocations, subjects <prefix>.chunks.<ns>.<pool>.<worker>.<invocation ID>.
type ChunksConfig struct {
	// MaxAge is how long a chunk is kept, and so how long a stream can
	// be read or resumed after it ended (default 1h).
	MaxAge metav1.Duration `json:"chunksMaxAge,omitzero"`
	// MaxBytes bounds one namespace's chunks stream, the tenant's budget
	// of retained output (default 64 MiB): beyond it that namespace's
	// oldest chunks go, never another namespace's. JetStream reserves it
	// when the stream is made.
	MaxBytes int64 `json:"chunksMaxBytes,omitempty"`
	// MaxPerInvocation bounds the chunks kept per invocation and worker
	// (default 100000): beyond it the oldest go.
	MaxPerInvocation int64 `json:"chunksPerInvocation,omitempty"`
	// MaxChunkBytes bounds one chunk message, headers included (default
	// 64 KiB + 1 KiB): the server refuses a bigger one, whatever a worker
	// sends.
	MaxChunkBytes int32 `json:"-"`
}

// DefaultMaxChunkBytes is the default bound of one chunk's data; the
// stream's message bound adds room for the headers.
const DefaultMaxChunkBytes = 64 << 10

// DefaultChunksMaxBytes is the default budget of one namespace's chunks.
const DefaultChunksMaxBytes = 64 << 20

func (c ChunksConfig) withDefaults() ChunksConfig {
	c.MaxAge.Duration = cmp.Or(c.MaxAge.Duration, time.Hour)
	c.MaxBytes = cmp.Or(c.MaxBytes, DefaultChunksMaxBytes)
	c.MaxChunkBytes = cmp.Or(c.MaxChunkBytes, DefaultMaxChunkBytes+chunkHeaderRoom)
	c.MaxPerInvocation = cmp.Or(c.MaxPerInvocation, 100000)
	return c
}

func (c ChunksConfig) validate() error {
	if c.MaxBytes < int64(c.MaxChunkBytes) {
		return fmt.Errorf("chunks max bytes %d (per namespace) must be at least one chunk's %d", c.MaxBytes, c.MaxChunkBytes)
	}
	return nil
}

// MaxChunkData is the largest chunk a worker may send: the message bound
// less room for the chunk headers.
func (c ChunksConfig) MaxChunkData() int { return max(int(c.MaxChunkBytes)-chunkHeaderRoom, 1) }

const chunkHeaderRoom = 1 << 10

// ChunkStreams opens (and creates) the namespaces' chunks streams with
// one connection, remembering those it has made sure of. The queue makes
// them (the auth callout when it admits a namespace's worker, the ingress
// at a namespace's invocation); workers only publish into their own
// namespace's.
type ChunkStreams struct {
	JS       jetstream.JetStream
	Cfg      ChunksConfig
	Stream   string // the invocation stream, the chunks streams' prefix
	Replicas int
	Subjects messages.Subjects

	streams jsensure.Cache[jetstream.Stream]
}

// ChunksNoRoomError is a chunks stream JetStream would not create: its
// storage (the server's max_file_store, or the account's) has no room left
// to reserve the stream's MaxBytes.
type ChunksNoRoomError struct {
	Stream   string
	MaxBytes int64
	Err      error
}

func (e *ChunksNoRoomError) Error() string {
	return fmt.Sprintf("chunks stream %s of %d bytes (the namespace's budget, -chunks-max-bytes): JetStream storage has no room left to reserve it "+
		"(size max_file_store for namespaces × (-objects-max-bytes + -chunks-max-bytes) + the streams): %v", e.Stream, e.MaxBytes, e.Err)
}

func (e *ChunksNoRoomError) Unwrap() error { return e.Err }

// Ensure creates (or updates to Cfg) namespace ns's chunks stream once per
// process and returns it. Limits retention with discard old: chunks are for
// reading while and after an invocation runs, up to MaxAge, and a full
// stream makes room by dropping the namespace's oldest rather than
// refusing a running invocation's output. An ingress reads chunks by
// sequence and a subject's last chunk without a consumer (a resume, a
// stream's end), through the stream's leader: no direct gets, which any
// replica answers, and a follower behind the newest writes answered an
// older last chunk, so a stream ended before its last chunks
// (TestLastChunkAfterPublishClustered; workers may not read the stream).
// A stream JetStream has no room for is a *ChunksNoRoomError, tried again
// once jsensure.RetryAfter has passed.
func (c *ChunkStreams) Ensure(ctx context.Context, ns string) (jetstream.Stream, error) {
	name := messages.ChunksStreamName(c.Stream, ns)
	return c.streams.Get(name, func() (jetstream.Stream, error) {
		st, err := c.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name:              name,
			Description:       "streamed invocation output of namespace " + ns + " (stream " + c.Stream + ")",
			Subjects:          c.Subjects.ChunkStreamSubjects(ns),
			Storage:           jetstream.FileStorage,
			Retention:         jetstream.LimitsPolicy,
			Replicas:          cmp.Or(c.Replicas, 1),
			MaxAge:            c.Cfg.MaxAge.Duration,
			MaxBytes:          c.Cfg.MaxBytes,
			MaxMsgSize:        c.Cfg.MaxChunkBytes,
			MaxMsgsPerSubject: c.Cfg.MaxPerInvocation,
			Discard:           jetstream.DiscardOld,
			AllowDirect:       false,
			// Workers choose their headers: a short window, so no worker's
			// Nats-Msg-Id holds back another's chunk for long.
			Duplicates: time.Second,
		})
		switch {
		case jsensure.NoRoom(err):
			return nil, &ChunksNoRoomError{Stream: name, MaxBytes: c.Cfg.MaxBytes, Err: err}
		case err != nil:
			return nil, fmt.Errorf("create chunks stream %s: %w", name, err)
		}
		return st, nil
	})
}
