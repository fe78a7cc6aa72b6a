package stream

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/internal/messages"
)

// ChunksConfig sizes the chunks stream (messages.ChunksStreamName): the
// retained output of streamed invocations, subjects
// <prefix>.chunk.<ns>.<pool>.<invocation ID>.
type ChunksConfig struct {
	// Stream names it (default messages.ChunksStreamName(Config.Stream)).
	Stream string
	// MaxAge is how long a chunk is kept, and so how long a stream can
	// be read or resumed after it ended (default 1h).
	MaxAge time.Duration
	// MaxBytes bounds the whole stream (default 1 GiB): beyond it the
	// oldest chunks go first.
	MaxBytes int64
	// MaxChunkBytes bounds one chunk message, headers included (default
	// 64 KiB + 1 KiB): the server refuses a bigger one, whatever a worker
	// sends.
	MaxChunkBytes int32
	// MaxPerInvocation bounds the chunks kept per invocation (default
	// 100000): beyond it the invocation's oldest go.
	MaxPerInvocation int64
}

// DefaultMaxChunkBytes is the default bound of one chunk's data; the
// stream's message bound adds room for the headers.
const DefaultMaxChunkBytes = 64 << 10

func (c ChunksConfig) withDefaults(streamName string) ChunksConfig {
	c.Stream = cmp.Or(c.Stream, messages.ChunksStreamName(streamName))
	c.MaxAge = cmp.Or(c.MaxAge, time.Hour)
	c.MaxBytes = cmp.Or(c.MaxBytes, 1<<30)
	c.MaxChunkBytes = cmp.Or(c.MaxChunkBytes, DefaultMaxChunkBytes+chunkHeaderRoom)
	c.MaxPerInvocation = cmp.Or(c.MaxPerInvocation, 100000)
	return c
}

// openChunks creates or updates the chunks stream. Limits retention with
// discard old: chunks are for reading while and after an invocation runs,
// up to MaxAge, and a full stream makes room by dropping the oldest
// rather than refusing a running invocation's output. Direct gets let an
// ingress read the last chunk of a subject without a consumer.
func openChunks(ctx context.Context, js jetstream.JetStream, cfg Config, subj messages.Subjects) (jetstream.Stream, error) {
	c := cfg.Chunks
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:              c.Stream,
		Description:       "streamed invocation output of stream " + cfg.Stream,
		Subjects:          subj.ChunkStreamSubjects(),
		Storage:           jetstream.FileStorage,
		Retention:         jetstream.LimitsPolicy,
		Replicas:          cfg.Replicas,
		MaxAge:            c.MaxAge,
		MaxBytes:          c.MaxBytes,
		MaxMsgSize:        c.MaxChunkBytes,
		MaxMsgsPerSubject: c.MaxPerInvocation,
		Discard:           jetstream.DiscardOld,
		AllowDirect:       true,
		// Workers choose their headers: a short window, so no worker's
		// Nats-Msg-Id holds back another's chunk for long.
		Duplicates: time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("create stream %s: %w", c.Stream, err)
	}
	return st, nil
}

// MaxChunkData is the largest chunk a worker may send: the message bound
// less room for the chunk headers.
func (c ChunksConfig) MaxChunkData() int { return max(int(c.MaxChunkBytes)-chunkHeaderRoom, 1) }

const chunkHeaderRoom = 1 << 10
