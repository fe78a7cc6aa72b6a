package sidecar

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/sidecar/frameworkclient"
)

// invoke calls the framework for dispatch d. A streamed answer's chunks
// are relayed, in order and as they arrive, to the invocation's chunk
// subject under this worker's name (messages.Subjects.ChunkSubject) in the
// namespace's chunks stream, with the attempt, a random execution name
// fresh for this call (a rerun of the same attempt after a restart is
// another execution) and their number within it, from 1; invoke returns
// only once every chunk is stored, so the Result
// published after it never overtakes a chunk. A chunk that cannot be
// stored fails the invocation (its reader would see a gap) and stops the
// framework's stream.
func (s *Sidecar) invoke(ctx context.Context, d messages.Dispatch, req framework.Request) (framework.Response, error) {
	subject := s.subjects.ChunkSubject(s.cfg.WorkerNamespace, s.cfg.Pool, s.cfg.WorkerName, d.InvocationID)
	attempt := strconv.Itoa(d.Attempt)
	execution := nuid.Next()
	n := 0
	lim := frameworkclient.StreamLimits{MaxChunkBytes: d.MaxChunkBytes, MaxChunks: int(d.MaxChunks), MaxSummaryBytes: int(min(d.MaxResultBytes, 1<<20))}
	return s.client.InvokeStream(ctx, req, lim, func(chunk []byte) error {
		n++
		m := nats.NewMsg(subject)
		m.Data = chunk
		m.Header.Set(messages.ChunkAttemptHeader, attempt)
		m.Header.Set(messages.ChunkExecutionHeader, execution)
		m.Header.Set(messages.ChunkSeqHeader, strconv.Itoa(n))
		if err := s.publishChunk(ctx, m); err != nil {
			return fmt.Errorf("relay chunk %d of the framework's stream: %w", n, err)
		}
		s.metrics.chunks.Inc()
		return nil
	})
}

// publishChunk stores one chunk, retrying a failed publish for a while
// (NATS reconnecting) before giving up. A publish is awaited before the
// next chunk is read: order is kept without a Nats-Msg-Id (a worker's
// message IDs are never trusted: see publishResult), and a framework that
// outruns NATS is slowed down rather than buffered. A retry after a lost
// ack may store a chunk twice; readers drop a chunk number they have seen.
func (s *Sidecar) publishChunk(ctx context.Context, m *nats.Msg) error {
	backoff := wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Cap: time.Second, Steps: math.MaxInt32}
	deadline := time.Now().Add(chunkPublishPatience)
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := s.js.PublishMsg(pctx, m)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		s.log.Warn("publish chunk; retrying", "subject", m.Subject, "err", err, "in", backoff.Duration)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff.Step()):
		}
	}
}

// chunkPublishPatience bounds the retries of one chunk.
const chunkPublishPatience = 15 * time.Second
